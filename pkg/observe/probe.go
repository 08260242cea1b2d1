package observe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Check is one readiness check: nil means ready.
type Check func(ctx context.Context) error

// Probe answers /healthz (the process lives), /readyz (every dependency
// answers) and /metrics. Readiness failures are logged once per change, not
// on every poll.
type Probe struct {
	log      zerolog.Logger
	reg      *prometheus.Registry
	mu       sync.Mutex
	checks   map[string]Check
	lastBad  map[string]string
	timeout  time.Duration
	draining bool
}

// NewProbe returns a probe that serves metrics from reg.
func NewProbe(log zerolog.Logger, reg *prometheus.Registry) *Probe {
	return &Probe{log: log, reg: reg, checks: map[string]Check{}, lastBad: map[string]string{}, timeout: 2 * time.Second}
}

// AddCheck registers a named readiness check.
func (p *Probe) AddCheck(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks[name] = c
}

// SetDraining makes /readyz fail so load balancers stop sending traffic
// while the service drains.
func (p *Probe) SetDraining() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = true
}

// Ready runs every check and returns a map of failures (empty when ready).
func (p *Probe) Ready(ctx context.Context) map[string]string {
	p.mu.Lock()
	checks := make(map[string]Check, len(p.checks))
	for k, v := range p.checks {
		checks[k] = v
	}
	draining := p.draining
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	bad := map[string]string{}
	if draining {
		bad["service"] = "draining"
	}
	names := make([]string, 0, len(checks))
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := checks[n](ctx); err != nil {
			bad[n] = err.Error()
		}
	}
	p.logChanges(bad)
	return bad
}

func (p *Probe) logChanges(bad map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, msg := range bad {
		if p.lastBad[n] != msg {
			p.log.Warn().Str("check", n).Str("reason", msg).Msg("not ready")
		}
	}
	for n := range p.lastBad {
		if _, still := bad[n]; !still {
			p.log.Info().Str("check", n).Msg("ready again")
		}
	}
	p.lastBad = bad
}

// Router is where Register adds its routes; *http.ServeMux is one.
type Router interface {
	Handle(pattern string, handler http.Handler)
}

// Register adds /healthz, /readyz and /metrics to mux.
func (p *Probe) Register(mux Router) {
	mux.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.Handle("GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad := p.Ready(r.Context())
		if len(bad) > 0 {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "failing": bad})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}))
	if p.reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{Registry: p.reg}))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve runs the probe's endpoints on addr until ctx ends. An empty addr
// serves nothing and just waits for ctx.
func (p *Probe) Serve(ctx context.Context, addr string) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	mux := http.NewServeMux()
	p.Register(mux)
	return ServeHTTP(ctx, addr, mux, 5*time.Second)
}

// ServeHTTP serves h on addr with sane timeouts until ctx ends, then shuts
// down gracefully within grace.
func ServeHTTP(ctx context.Context, addr string, h http.Handler, grace time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, grace)
}

// ServeListener is ServeHTTP on an open listener.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}
