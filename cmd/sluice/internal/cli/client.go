package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Client limits.
const (
	// requestTimeout bounds one request that is not an event stream.
	requestTimeout = 30 * time.Second
	// maxResponse bounds a response body the client reads whole.
	maxResponse = 256 << 20
	// userAgent names the client to the server.
	userAgent = "sluice-cli"
)

// Client talks to the HTTP API v1 of one Sluice gateway. It is safe for
// concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client of the gateway at rawURL ("http://host:port",
// "https://…", or a bare "host:port" meaning http) that sends token as a
// bearer token when it is not empty.
func NewClient(rawURL, token string) (*Client, error) {
	base, err := parseBaseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if token != "" && !validToken(token) {
		return nil, errors.New("the token must be visible ASCII characters without spaces or commas")
	}
	return &Client{base: base, token: token, hc: &http.Client{}}, nil
}

// Base is the gateway's base URL.
func (c *Client) Base() string { return c.base }

// parseBaseURL checks a gateway URL and returns it without a trailing slash.
func parseBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("the server URL is empty")
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("the server URL %q is not a URL: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("the server URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("the server URL %q must be scheme://host[:port][/path]", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// validToken reports whether a token can be sent in a header: visible
// ASCII, no space or comma (what the gateway accepts).
func validToken(t string) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c > '~' || c == ',' {
			return false
		}
	}
	return true
}

// newRequest builds a request for path (which starts with "/").
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send runs a request, turning transport failures into a readable error.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil && !errors.Is(ctxErr, context.DeadlineExceeded) {
			return nil, ctxErr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("cannot reach the server at %s: %w", c.base, err)
	}
	return resp, nil
}

// call runs one request and returns the body of a 2xx answer, its status,
// or an *APIError.
func (c *Client) call(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, resp.StatusCode, newAPIError(resp.StatusCode, resp.Header, data)
	}
	return data, resp.StatusCode, nil
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
	// Limit is the page size (0: the server's default).
	Limit int
	// Cursor asks for the page after a previous page's NextCursor.
	Cursor string
}

// List reads one page of jobs, newest first.
func (c *Client) List(ctx context.Context, q ListQuery) (contracts.JobPage, []byte, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	if q.Kind != "" {
		v.Set("kind", q.Kind)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	path := "/v1/jobs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	page, raw, _, err := callJSON[contracts.JobPage](ctx, c, http.MethodGet, path, nil)
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
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, newAPIError(resp.StatusCode, resp.Header, data)
	}
	if resp.StatusCode == http.StatusNoContent {
		resp.Body.Close()
		return nil, errStreamOver
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream") {
		resp.Body.Close()
		return nil, errNoEventStream
	}
	return resp.Body, nil
}
