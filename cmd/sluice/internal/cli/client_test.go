package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseBaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, err string
	}{
		{in: "http://127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{in: "http://127.0.0.1:8080/", want: "http://127.0.0.1:8080"},
		{in: " https://sluice.example.com/api/ ", want: "https://sluice.example.com/api"},
		{in: "localhost:8080", want: "http://localhost:8080"},
		{in: "127.0.0.1:9", want: "http://127.0.0.1:9"},
		{in: "", err: "empty"},
		{in: "ftp://host", err: "must start with http:// or https://"},
		{in: "http://", err: "scheme://host"},
		{in: "http://u:p@host", err: "scheme://host"},
		{in: "http://host/?q=1", err: "scheme://host"},
		{in: "http://[::1", err: "not a URL"},
	}
	for _, tc := range tests {
		c, err := NewClient(tc.in, "")
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, c.Base(), tc.in)
	}
}

// newAPIError is the *APIError the CLI's client makes of one answer.
func newAPIError(status int, h http.Header, body []byte) *APIError {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, "")
	if err != nil {
		panic(err)
	}
	_, _, err = c.call(context.Background(), http.MethodGet, "/v1/stats", nil)
	var ae *APIError
	if !errors.As(err, &ae) {
		panic(fmt.Sprintf("not an APIError: %v", err))
	}
	return ae
}

func TestAPIError(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("Retry-After", "3")
	e := newAPIError(429, h, []byte(`{"error":{"code":"tenant_cap_reached","message":"the cap of tenant a is reached","limit":"tenant"}}`))
	require.Equal(t, "the cap of tenant a is reached (HTTP 429 tenant_cap_reached, retry after 3s)", e.Error())
	require.Equal(t, "tenant", e.Limit)
	require.Equal(t, 3*time.Second, e.RetryAfter)
	require.JSONEq(t, string(e.Body), string(e.JSONBody()))

	e = newAPIError(401, http.Header{}, []byte(`{"error":{"code":"unauthorized","message":"a valid API token is required: Authorization: Bearer <token>"}}`))
	require.Equal(t, "a valid API token is required: Authorization: Bearer <token> (HTTP 401 unauthorized); give the API token with SLUICE_TOKEN or --token", e.Error())

	e = newAPIError(503, http.Header{}, nil)
	require.Equal(t, "Service Unavailable (HTTP 503)", e.Error())
	require.JSONEq(t, `{"error":{"code":"http_503","message":"Service Unavailable"}}`, string(e.JSONBody()))

	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'x'
	}
	e = newAPIError(500, http.Header{}, long)
	require.Less(t, len(e.Message), 260, "a long body is cut")
}

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantPos []string
		wantKey string
		json    bool
		err     string
	}{
		{name: "flags after the argument", args: []string{"sleep", "--key", "k", "--json"}, wantPos: []string{"sleep"}, wantKey: "k", json: true},
		{name: "flags before the argument", args: []string{"--json", "--key=k", "sleep"}, wantPos: []string{"sleep"}, wantKey: "k", json: true},
		{name: "double dash ends flags", args: []string{"--key", "k", "--", "--json"}, wantPos: []string{"--json"}, wantKey: "k"},
		{name: "too many", args: []string{"a", "b"}, err: `unexpected argument "b"`},
		{name: "too few", args: []string{"--json"}, err: "missing argument"},
		{name: "flag without value", args: []string{"sleep", "--key"}, err: "flag needs an argument: -key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			te := newTestEnv("http://x", false, nil)
			inv := &invocation{env: te.env, cmd: cmdSubmit}
			fs := inv.flagSet()
			key := fs.String("key", "", "")
			pos, err := inv.parse(fs, tc.args, 1, 1)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				var ue *usageError
				require.ErrorAs(t, err, &ue)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantPos, pos)
			require.Equal(t, tc.wantKey, *key)
			require.Equal(t, tc.json, inv.g.json)
		})
	}
}

func TestErrorCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, ExitOK, errorCode(nil))
	require.Equal(t, ExitUsage, errorCode(&usageError{"x"}))
	require.Equal(t, ExitRejected, errorCode(&APIError{Status: 429}))
	require.Equal(t, ExitFailed, errorCode(&APIError{Status: 404}))
	require.Equal(t, ExitFailed, errorCode(&finishedError{api: &APIError{Status: 409}}))
	require.Equal(t, ExitInterrupted, errorCode(errInterrupted))
	require.Equal(t, ExitOK, outcomeCode("succeeded"))
	require.Equal(t, ExitFailed, outcomeCode("failed"))
	require.Equal(t, ExitCancelled, outcomeCode("cancelled"))
}
