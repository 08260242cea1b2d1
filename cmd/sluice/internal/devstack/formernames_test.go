package devstack

import (
	"bytes"
	"context"
	"net"
	"net/http"
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

// TestFormerNamesKeepTheStackClosed: sluice dev started with the former
// SLUICE_API_TOKENS (as an upgrade that did not rename it) still runs in
// token mode, never open, and warns naming SLUICE_GATEWAY_API_TOKENS.
func TestFormerNamesKeepTheStackClosed(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	o := Options{Workers: -1, NATSListen: "127.0.0.1:0", Log: zerolog.New(&logs)}
	o.Environ = testEnv(t.TempDir(), map[string]string{"SLUICE_API_TOKENS": "acme:former-name-token"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	o.HTTPListener = ln
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		cancel()
		_ = ln.Close()
		require.NoError(t, err)
	}
	b := &bundle{t: t, stack: s, base: "http://" + s.HTTPAddr, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- s.Run(ctx) }()
	t.Cleanup(b.stop)
	b.waitReady()

	get := func(token string) int {
		req, err := http.NewRequest(http.MethodGet, b.base+"/v1/jobs", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""), "token mode: no token, no answer")
	require.Equal(t, http.StatusOK, get("former-name-token"))
	require.Contains(t, logs.String(), `"variable":"SLUICE_API_TOKENS","use":"SLUICE_GATEWAY_API_TOKENS"`)
	require.NotContains(t, logs.String(), "former-name-token", "the warning never shows the value")
}
