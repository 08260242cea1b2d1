package gateway_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestLogsNeverShowTokensOrPayloads runs accepted, rejected, failing and
// rate-limited requests over HTTP and NATS, with a token and distinctive
// payloads, keys and query strings, at debug level, and greps the whole log.
func TestLogsNeverShowTokensOrPayloads(t *testing.T) {
	t.Parallel()
	const (
		payloadMark = "PAYLOAD-c0ffee-7f3a9c"
		keyMark     = "KEY-deadbeef-51d2"
		queryMark   = "qmark-feedface-88"
		wrongToken  = "tok-WRONG-a1b2c3d4e5"
	)
	logs := &syncBuffer{}
	b := setupWith(t, hooks{deps: func(d *gateway.Deps) {
		d.Log = zerolog.New(logs).Level(zerolog.DebugLevel)
	}}, rateLimits(1, 10, 1000, 100), caps(0, 2))

	body := `{"kind":"secretive","key":"` + keyMark + `","payload":{"card":"` + payloadMark + `"}}`
	tokA := map[string]string{contracts.HeaderToken: tokenA}

	// HTTP: admitted, joined, over the tenant cap, invalid, bad token,
	// unknown job with a query string, then the tenant rate limit.
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, body).status)
	require.Equal(t, http.StatusOK, b.submit(tokenA, body).status)
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"x","payload":"`+payloadMark+`"}`).status)
	require.Equal(t, http.StatusTooManyRequests, b.submit(tokenA, `{"kind":"z","payload":["`+payloadMark+`"]}`).status)
	require.Equal(t, http.StatusBadRequest, b.submit(tokenA, `{"kind":"`+payloadMark+`",`).status)
	require.Equal(t, http.StatusUnprocessableEntity, b.submit(tokenA, `{"kind":"bad kind `+payloadMark+`"}`).status)
	require.Equal(t, http.StatusUnauthorized, b.submit(wrongToken, body).status)
	require.Equal(t, http.StatusUnauthorized, b.do(req{method: http.MethodGet, path: "/v1/stats",
		header: map[string]string{"Authorization": "Basic " + wrongToken}}).status)
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/jobs?kind=" + queryMark, token: tokenA}).status)
	require.Equal(t, http.StatusNotFound, b.do(req{method: http.MethodGet, path: "/v1/jobs/" + queryMark, token: tokenA}).status)

	// NATS: accepted (tenant B), invalid, bad token, over the cap.
	require.Equal(t, http.StatusAccepted, b.natsSubmit(map[string]string{contracts.HeaderToken: tokenB}, body).Status)
	require.Equal(t, http.StatusBadRequest, b.natsSubmit(tokA, `{"kind":"`+payloadMark+`",`).Status)
	require.Equal(t, http.StatusUnauthorized, b.natsSubmit(map[string]string{contracts.HeaderToken: wrongToken}, body).Status)
	require.Equal(t, http.StatusTooManyRequests, b.natsSubmit(tokA, `{"kind":"y","payload":"`+payloadMark+`"}`).Status)

	// Rate limited over HTTP (tenant A's burst of 10 is spent by now).
	var limited bool
	for range 20 {
		if r := b.submit(tokenA, body); r.status == http.StatusTooManyRequests && r.errBody(t).Code == contracts.CodeRateLimited {
			limited = true
			break
		}
	}
	require.True(t, limited)

	out := logs.String()
	// The capture works: requests were logged, with their tenant.
	require.Contains(t, out, `"message":"http request"`)
	require.Contains(t, out, `"message":"nats submit"`)
	require.Contains(t, out, `"tenant":"`+tenantA+`"`)
	for _, secret := range []string{tokenA, tokenB, wrongToken, payloadMark, keyMark, queryMark, "card"} {
		require.NotContains(t, out, secret, "the log shows %q", secret)
	}
	require.False(t, strings.Contains(strings.ToLower(out), "bearer"), "no Authorization value in the log")
}
