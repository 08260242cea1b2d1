package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Client limits.
const (
	// requestTimeout bounds one request that is not an event stream.
	requestTimeout = 30 * time.Second
	// userAgent names the client to the server.
	userAgent = "sluice-cli"
)

// Client is the CLI's view of the gateway: pkg/client, with the raw
// answers kept for --json and errors as *APIError. It is safe for
// concurrent use.
type Client struct {
	api *client.Client
}

// NewClient returns a client of the gateway at rawURL ("http://host:port",
// "https://…", or a bare "host:port" meaning http) that sends token as a
// bearer token when it is not empty.
func NewClient(rawURL, token string) (*Client, error) {
	api, err := client.New(rawURL, client.WithToken(token), client.WithUserAgent(userAgent))
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "client: "))
	}
	return &Client{api: api}, nil
}

// Base is the gateway's base URL.
func (c *Client) Base() string { return c.api.BaseURL() }

// call runs one request and returns the body of a 2xx answer, its status,
// or an *APIError.
func (c *Client) call(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	data, status, err := c.api.Raw(ctx, method, path, body)
	return data, status, cliError(err)
}

// cliError turns pkg/client's errors into the CLI's: an answer of the
// server is an *APIError, a transport failure drops the package prefix.
func cliError(err error) error {
	var ce *client.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return fromClientError(ce)
	case errors.Is(err, client.ErrStreamOver):
		return errStreamOver
	case errors.Is(err, client.ErrNoEventStream):
		return errNoEventStream
	case errors.Is(err, context.Canceled):
		return err
	}
	return errors.New(strings.TrimPrefix(err.Error(), "client: "))
}

// callJSON runs call and decodes its answer into a T. It returns the raw
// answer too, for --json output.
func callJSON[T any](ctx context.Context, c *Client, method, path string, body []byte) (T, []byte, int, error) {
	var v T
	data, status, err := c.call(ctx, method, path, body)
	if err != nil {
		return v, nil, status, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, nil, status, fmt.Errorf("decode the answer of %s %s: %w", method, path, err)
	}
	return v, data, status, nil
}

// Submit posts a job. created is false when the server returned an active
// job with the same key instead (200).
func (c *Client) Submit(ctx context.Context, req contracts.SubmitRequest) (job contracts.Job, raw []byte, created bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return job, nil, false, fmt.Errorf("encode the request: %w", err)
	}
	job, raw, status, err := callJSON[contracts.Job](ctx, c, http.MethodPost, "/v1/jobs", body)
	return job, raw, status == http.StatusAccepted, err
}

// Job reads one job.
func (c *Client) Job(ctx context.Context, id string) (contracts.Job, []byte, error) {
	job, raw, _, err := callJSON[contracts.Job](ctx, c, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil)
	return job, raw, err
}

// ListQuery filters and pages GET /v1/jobs.
type ListQuery struct {
	// State keeps only jobs in this state (empty: every state).
	State contracts.JobState
	// Kind keeps only jobs of this kind (empty: every kind).
	Kind string
	// Parent lists the children of this fan-out parent instead of the
	// top-level jobs.
	Parent string
	// Limit is the page size (0: the server's default).
	Limit int
	// Cursor asks for the page after a previous page's NextCursor.
	Cursor string
}

// List reads one page of jobs, newest first.
func (c *Client) List(ctx context.Context, q ListQuery) (contracts.JobPage, []byte, error) {
	page, raw, _, err := callJSON[contracts.JobPage](ctx, c, http.MethodGet, client.Query(q).Path(), nil)
	return page, raw, err
}

// Cancel asks for a job to be cancelled and returns it as it is afterwards.
func (c *Client) Cancel(ctx context.Context, id string) (contracts.Job, []byte, error) {
	job, raw, _, err := callJSON[contracts.Job](ctx, c, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil)
	return job, raw, err
}

// Stats reads the caps, counts and workers.
func (c *Client) Stats(ctx context.Context) (contracts.Stats, []byte, error) {
	st, raw, _, err := callJSON[contracts.Stats](ctx, c, http.MethodGet, "/v1/stats", nil)
	return st, raw, err
}

// errNoEventStream means the server answered an events request with
// something other than an event stream.
var errNoEventStream = errors.New("the server did not answer with an event stream")

// errStreamOver means the server answered 204 No Content: the stream has
// nothing more to send (the job is final), and the client must not
// reconnect.
var errStreamOver = errors.New("the event stream is over")

// openEvents opens an event stream at path, resuming after lastID when it
// is not empty. The caller closes the body. A non-2xx answer is an
// *APIError; a 2xx answer that is not text/event-stream is errNoEventStream.
func (c *Client) openEvents(ctx context.Context, path, lastID string) (io.ReadCloser, error) {
	body, err := c.api.OpenEvents(ctx, path, lastID)
	return body, cliError(err)
}
