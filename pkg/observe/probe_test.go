package observe_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/observe"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newMux(p *observe.Probe) *http.ServeMux {
	mux := http.NewServeMux()
	p.Register(mux)
	return mux
}

type response struct {
	code   int
	header http.Header
	body   string
}

func get(t *testing.T, h http.Handler, path string) response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

func decodeBody(t *testing.T, r response) map[string]any {
	t.Helper()
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &m), "body %q", r.body)
	return m
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	p := observe.NewProbe(zerolog.Nop(), nil)
	p.AddCheck("db", func(context.Context) error { return errors.New("down") })
	p.SetDraining()
	r := get(t, newMux(p), "/healthz")
	// Liveness does not depend on readiness.
	assert.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, map[string]any{"status": "ok"}, decodeBody(t, r))
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	ok := func(context.Context) error { return nil }
	fail := func(msg string) observe.Check {
		return func(context.Context) error { return errors.New(msg) }
	}
	tests := []struct {
		name     string
		checks   map[string]observe.Check
		draining bool
		failing  map[string]any // nil: ready
	}{
		{name: "no checks"},
		{name: "all pass", checks: map[string]observe.Check{"nats": ok, "store": ok}},
		{
			name:    "one fails",
			checks:  map[string]observe.Check{"nats": ok, "store": fail("database is locked")},
			failing: map[string]any{"store": "database is locked"},
		},
		{
			name:    "two fail",
			checks:  map[string]observe.Check{"nats": fail("not connected"), "store": fail("gone"), "cache": ok},
			failing: map[string]any{"nats": "not connected", "store": "gone"},
		},
		{
			name:     "draining",
			checks:   map[string]observe.Check{"nats": ok},
			draining: true,
			failing:  map[string]any{"service": "draining"},
		},
		{
			name:     "draining and failing",
			checks:   map[string]observe.Check{"nats": fail("not connected")},
			draining: true,
			failing:  map[string]any{"service": "draining", "nats": "not connected"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := observe.NewProbe(zerolog.Nop(), prometheus.NewRegistry())
			for n, c := range tt.checks {
				p.AddCheck(n, c)
			}
			if tt.draining {
				p.SetDraining()
			}
			r := get(t, newMux(p), "/readyz")
			body := decodeBody(t, r)
			if tt.failing == nil {
				assert.Equal(t, http.StatusOK, r.code)
				assert.Equal(t, map[string]any{"status": "ready"}, body)
				return
			}
			assert.Equal(t, http.StatusServiceUnavailable, r.code)
			assert.Equal(t, map[string]any{"status": "unavailable", "failing": tt.failing}, body)
		})
	}
}

func TestReadyChecksGetADeadline(t *testing.T) {
	t.Parallel()
	p := observe.NewProbe(zerolog.Nop(), nil)
	p.AddCheck("slow", func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	})
	assert.Empty(t, p.Ready(t.Context()))

	// A check that honours its context fails when the request is gone.
	p.AddCheck("ctx", func(ctx context.Context) error { return ctx.Err() })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.Equal(t, map[string]string{"ctx": context.Canceled.Error()}, p.Ready(ctx))
}

func TestReadyLogsOnlyChanges(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	p := observe.NewProbe(observe.NewLogger("svc", &buf, "info", ""), nil)
	var failure atomic.Pointer[string]
	p.AddCheck("store", func(context.Context) error {
		if msg := failure.Load(); msg != nil {
			return errors.New(*msg)
		}
		return nil
	})
	type entry struct{ level, check, reason, message string }
	logged := func() []entry {
		var out []entry
		for _, l := range buf.lines(t) {
			e := entry{level: l["level"].(string), check: l["check"].(string), message: l["message"].(string)}
			if r, ok := l["reason"].(string); ok {
				e.reason = r
			}
			out = append(out, e)
		}
		return out
	}

	p.Ready(t.Context())
	assert.Empty(t, logged(), "ready from the start logs nothing")

	locked := "locked"
	failure.Store(&locked)
	p.Ready(t.Context())
	p.Ready(t.Context())
	assert.Equal(t, []entry{{"warn", "store", "locked", "not ready"}}, logged())

	gone := "gone"
	failure.Store(&gone)
	p.Ready(t.Context())
	p.Ready(t.Context())
	failure.Store(nil)
	p.Ready(t.Context())
	p.Ready(t.Context())
	assert.Equal(t, []entry{
		{"warn", "store", "locked", "not ready"},
		{"warn", "store", "gone", "not ready"},
		{"info", "store", "", "ready again"},
	}, logged())
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_test_things_total", Help: "Things."}, []string{"kind"})
	reg.MustRegister(c)
	c.WithLabelValues("email").Add(3)

	r := get(t, newMux(observe.NewProbe(zerolog.Nop(), reg)), "/metrics")
	assert.Equal(t, http.StatusOK, r.code)
	assert.Contains(t, r.body, "# HELP sluice_test_things_total Things.")
	assert.Contains(t, r.body, `sluice_test_things_total{kind="email"} 3`)
	// Only this registry is served, not the global one.
	assert.NotContains(t, r.body, "go_goroutines")
}

func TestMetricsWithoutRegistry(t *testing.T) {
	t.Parallel()
	r := get(t, newMux(observe.NewProbe(zerolog.Nop(), nil)), "/metrics")
	assert.Equal(t, http.StatusNotFound, r.code)
}

func TestProbeOnlyAnswersGet(t *testing.T) {
	t.Parallel()
	mux := newMux(observe.NewProbe(zerolog.Nop(), prometheus.NewRegistry()))
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, nil))
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, path)
	}
}

// client makes requests without keeping connections open, so no
// transport goroutine outlives a test.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

func serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- observe.ServeListener(ctx, ln, h, grace) }()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
		return nil
	}
}

func TestServeListenerStopsWhenCtxEnds(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	done := serve(ctx, ln, newMux(observe.NewProbe(zerolog.Nop(), nil)), time.Second)

	resp, err := client().Get(url + "/healthz")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	cancel()
	require.NoError(t, wait(t, done))
	_, err = client().Get(url + "/healthz")
	assert.Error(t, err, "still serving after ctx ended")
}

func TestServeListenerFinishesRequestsInFlight(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "finished")
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := serve(ctx, ln, h, 10*time.Second)

	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client().Get("http://" + ln.Addr().String())
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-entered
	cancel()
	close(release)
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, "finished", r.body)
	require.NoError(t, wait(t, done))
}

func TestServeListenerGraceRunsOut(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	entered := make(chan struct{})
	h := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // until the server closes the connection
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := serve(ctx, ln, h, 50*time.Millisecond)

	reqErr := make(chan error, 1)
	go func() {
		resp, err := client().Get("http://" + ln.Addr().String())
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
		reqErr <- err
	}()
	<-entered
	cancel()
	require.NoError(t, wait(t, done))
	assert.Error(t, <-reqErr, "the request was cut off")
}

func TestServeListenerReportsServeErrors(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	require.NoError(t, ln.Close())
	err := wait(t, serve(t.Context(), ln, http.NotFoundHandler(), time.Second))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "serve ")
}

func TestServeHTTP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- observe.ServeHTTP(ctx, "127.0.0.1:0", http.NotFoundHandler(), time.Second) }()
	cancel()
	require.NoError(t, wait(t, done))

	err := observe.ServeHTTP(t.Context(), "127.0.0.1:notaport", http.NotFoundHandler(), time.Second)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "listen "), err.Error())
}

func TestProbeServe(t *testing.T) {
	t.Parallel()
	p := observe.NewProbe(zerolog.Nop(), nil)
	for _, addr := range []string{"", "127.0.0.1:0"} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Serve(ctx, addr) }()
		cancel()
		require.NoError(t, wait(t, done), "addr %q", addr)
	}
}
