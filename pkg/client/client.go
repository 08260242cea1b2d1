package client

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

	"github.com/sluicehq/sluice/pkg/contracts"
)

// maxResponse bounds a response body the client reads whole.
const maxResponse = 256 << 20

// Client talks to the HTTP API v1 of one Sluice gateway. It is safe for
// concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
	agent string
}

// Option changes how New builds a Client.
type Option func(*Client)

// WithToken sends token as the bearer token of every request (token mode,
// SLUICE_API_TOKENS).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes requests with hc instead of a client of its own
// (timeouts, transports, proxies). Event streams last long: hc should have
// no overall Timeout; every call is bounded by its context instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent names the caller in the User-Agent header.
func WithUserAgent(agent string) Option { return func(c *Client) { c.agent = agent } }

// New returns a client of the gateway at baseURL ("http://host:port",
// "https://…", or a bare "host:port" meaning http).
func New(baseURL string, opts ...Option) (*Client, error) {
	base, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{base: base, hc: &http.Client{}, agent: "sluice-go-client"}
	for _, o := range opts {
		o(c)
	}
	if !validToken(c.token) {
		return nil, errors.New("client: the token must be visible ASCII characters without spaces or commas")
	}
	return c, nil
}

// BaseURL is the gateway's base URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Submit submits one job. created is true for a new job (202) and false
// when an active job with the same key was returned instead (200).
func (c *Client) Submit(ctx context.Context, req contracts.SubmitRequest) (job contracts.Job, created bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return contracts.Job{}, false, fmt.Errorf("client: encode the submit: %w", err)
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/jobs", body, &job)
	return job, status == http.StatusAccepted, err
}

// Get reads one job.
func (c *Client) Get(ctx context.Context, id string) (contracts.Job, error) {
	var job contracts.Job
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &job)
	return job, err
}

// Query selects a page of jobs for List; the zero value is the newest page
// of every top-level job (plain jobs and fan-out parents). Parent lists
// that parent's children instead.
type Query struct {
	State  contracts.JobState
	Kind   string
	Parent string
	Limit  int
	Cursor string
}

// List reads one page of jobs, newest first; page.NextCursor, when not
// empty, is the Cursor of the next page.
func (c *Client) List(ctx context.Context, q Query) (contracts.JobPage, error) {
	var page contracts.JobPage
	_, err := c.do(ctx, http.MethodGet, q.Path(), nil, &page)
	return page, err
}

// Path is the API path (with its query) that lists the jobs q selects.
func (q Query) Path() string {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	if q.Kind != "" {
		v.Set("kind", q.Kind)
	}
	if q.Parent != "" {
		v.Set("parent", q.Parent)
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
	return path
}

// Cancel asks for a job to be cancelled: a pending job ends cancelled at
// once, a running one when its worker stops (the returned job then says
// cancel_requested). A job already final is ErrConflict.
func (c *Client) Cancel(ctx context.Context, id string) (contracts.Job, error) {
	var job contracts.Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &job)
	return job, err
}

// Stats reads the caps, the counts by state, the workers and the recent
// rejections.
func (c *Client) Stats(ctx context.Context) (contracts.Stats, error) {
	var s contracts.Stats
	_, err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &s)
	return s, err
}

// Raw runs one request of the API (path starts with "/v1/…", body is JSON
// or nil) and returns a 2xx answer as the server sent it, with its status,
// for callers that pass the JSON on (a command line's --json); anything
// else is an *Error.
func (c *Client) Raw(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("client: read the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, resp.StatusCode, newError(resp.StatusCode, resp.Header, data)
	}
	return data, resp.StatusCode, nil
}

// do runs one request and decodes a 2xx answer into out; anything else is
// an *Error.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	data, status, err := c.Raw(ctx, method, path, body)
	if err != nil {
		return status, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return status, fmt.Errorf("client: decode the answer of %s %s: %w", method, path, err)
		}
	}
	return status, nil
}

// newRequest builds a request for path (which starts with "/").
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", c.agent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send runs a request; a transport failure names the server.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("client: cannot reach the server at %s: %w", c.base, err)
	}
	return resp, nil
}

// parseBaseURL checks a gateway URL and returns it without a trailing slash.
func parseBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("client: the server URL is empty")
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("client: the server URL %q is not a URL: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("client: the server URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("client: the server URL %q must be scheme://host[:port][/path]", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// validToken reports whether a token can be sent in a header.
func validToken(t string) bool {
	for i := 0; i < len(t); i++ {
		if ch := t[i]; ch <= ' ' || ch > '~' || ch == ',' {
			return false
		}
	}
	return true
}
