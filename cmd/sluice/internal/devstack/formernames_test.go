package devstack

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a log sink the stack's goroutines may share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestFormerNamesInTheStack: sluice dev started as a deployment of the
// last release would be (the design's names, one renamed gateway limit,
// SLUICE_RETRY_INTERVAL and no SLUICE_GATEWAY_RETRY_AFTER) runs in token
// mode with its caps. The design's names draw no warning; the renamed one
// is read and warned about; SLUICE_RETRY_INTERVAL is the scheduler's, and
// the gateway still takes its Retry-After from it, warning that it sets
// only the scheduler's re-offer period now.
func TestFormerNamesInTheStack(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	dataDir := t.TempDir()
	o := Options{Workers: -1, Log: zerolog.New(&logs)}
	o.Environ = testEnv(dataDir, map[string]string{
		"SLUICE_API_TOKENS":       "acme:contract-name-token",
		"SLUICE_MAX_ACTIVE":       "1",
		"SLUICE_RETRY_INTERVAL":   "3s",
		"SLUICE_TENANT_MAX_ITEMS": "50",
	})
	delete(o.Environ, "SLUICE_GATEWAY_RETRY_AFTER")
	b := run(t, dataDir, o)
	b.waitReady()

	do := func(method, path, token, body string) *http.Response {
		req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusUnauthorized, do(http.MethodGet, "/v1/jobs", "", "").StatusCode, "token mode: no token, no answer")
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/jobs", "contract-name-token", "").StatusCode)

	// No worker runs: the first job stays active, and SLUICE_MAX_ACTIVE=1
	// refuses the second, telling the client to wait SLUICE_RETRY_INTERVAL.
	job := `{"kind":"sleep","payload":{"ms":1}}`
	require.Equal(t, http.StatusAccepted, do(http.MethodPost, "/v1/jobs", "contract-name-token", job).StatusCode)
	refused := do(http.MethodPost, "/v1/jobs", "contract-name-token", job)
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	require.Equal(t, "3", refused.Header.Get("Retry-After"))

	out := logs.String()
	for _, contract := range []string{"SLUICE_API_TOKENS", "SLUICE_MAX_ACTIVE"} {
		require.NotContains(t, out, `"variable":"`+contract+`"`, "a name of the design draws no warning")
	}
	require.Contains(t, out, `"component":"gateway","variable":"SLUICE_TENANT_MAX_ITEMS","use":"SLUICE_GATEWAY_TENANT_MAX_ITEMS"`)
	require.Contains(t, out, `"component":"gateway","variable":"SLUICE_RETRY_INTERVAL","use":"SLUICE_GATEWAY_RETRY_AFTER"`)
	require.Contains(t, out, "SLUICE_RETRY_INTERVAL now sets only the scheduler's re-offer period")
	require.NotContains(t, out, `"component":"scheduler","variable"`, "the scheduler reads its own variable")
	require.NotContains(t, out, "contract-name-token", "no warning shows a token")
}
