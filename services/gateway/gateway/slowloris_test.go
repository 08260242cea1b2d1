package gateway_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// TestSlowlorisDisconnected opens a raw TCP connection and sends a
// request's headers one byte at a time, slower than the read-header
// timeout allows: the server must hang up before the headers are done,
// without answering, and keep serving other clients.
func TestSlowlorisDisconnected(t *testing.T) {
	t.Parallel()
	const readHeader = 300 * time.Millisecond
	b := setupWith(t, hooks{gw: func(g *gateway.Gateway) {
		gateway.SetServerTimeouts(g, readHeader, 5*time.Second, 5*time.Second, 5*time.Second)
	}})
	addr := strings.TrimPrefix(b.gws[0].serveURL, "http://")

	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()

	// The reader sees what the server sends, then its hang-up.
	type readResult struct {
		data []byte
		at   time.Time
	}
	closed := make(chan readResult, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		data, _ := io.ReadAll(conn)
		closed <- readResult{data: data, at: time.Now()}
	}()

	request := "GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slow: " + strings.Repeat("a", 40) + "\r\n\r\n"
	start := time.Now()
	sent := 0
	var got readResult
send:
	for sent < len(request) {
		select {
		case got = <-closed:
			break send
		case <-time.After(50 * time.Millisecond): // 6 bytes per read-header timeout
		}
		if _, err := conn.Write([]byte{request[sent]}); err != nil {
			got = <-closed
			break
		}
		sent++
	}
	if got.at.IsZero() {
		got = <-closed // every byte went out; wait for the reader anyway
	}
	require.Less(t, sent, len(request), "the server must hang up before the headers are complete")
	took := got.at.Sub(start)
	require.GreaterOrEqual(t, took, readHeader-50*time.Millisecond)
	require.Less(t, took, 3*time.Second, "disconnected within a few read-header timeouts")
	require.NotContains(t, string(got.data), "200 OK", "a half-sent request is never served")

	// The server still serves a client that sends its request at once.
	r := b.doOn(b.gws[0].serveURL, req{method: http.MethodGet, path: "/healthz"})
	require.Equal(t, http.StatusOK, r.status)
}
