// Package gateway is Sluice's front door: the HTTP API v1 and the NATS
// submit endpoint, with the same validation, authentication, dedup and
// admission caps behind both.
//
// A Gateway is wired by hand from a Config and its Deps (store, NATS
// connection, JetStream, logger, clock, metrics registry), so the gateway
// binary and the all-in-one dev stack build it the same way:
//
//	gw, err := gateway.New(cfg, gateway.Deps{Store: st, NC: nc, JS: js, Log: log})
//	...
//	err = gw.Run(ctx) // until ctx ends, then a graceful shutdown
//
// Run serves the HTTP API on cfg.HTTPAddr; Serve does the same on a
// listener the caller opened (tests bind port 0). Handler exposes the HTTP
// API alone for httptest.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/cancel"
	"github.com/sluicehq/sluice/services/gateway/internal/httpapi"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
	"github.com/sluicehq/sluice/services/gateway/internal/natsapi"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
	"github.com/sluicehq/sluice/services/gateway/internal/rejections"
	"github.com/sluicehq/sluice/services/gateway/internal/scaling"
)

// streamSetupTimeout bounds the best-effort creation of the job stream at
// startup.
const streamSetupTimeout = 5 * time.Second

// serverTimeouts are the HTTP server's connection timeouts: they bound
// slow clients (slowloris headers, trickled bodies, stalled reads, idle
// keep-alives).
type serverTimeouts struct {
	readHeader, read, write, idle time.Duration
}

// defaultServerTimeouts are the production timeouts (those of
// observe.ServeListener).
var defaultServerTimeouts = serverTimeouts{
	readHeader: 5 * time.Second,
	read:       30 * time.Second,
	write:      60 * time.Second,
	idle:       120 * time.Second,
}

// maxHeaderBytes bounds a request's header.
const maxHeaderBytes = 64 << 10

// Deps are the gateway's collaborators. Store and NC are required; the
// rest have defaults.
type Deps struct {
	// Store holds the jobs: the truth.
	Store store.Store
	// NC is the NATS connection for the submit endpoint, cancel messages and
	// the worker roster.
	NC *nats.Conn
	// JS publishes due messages; nil derives it from NC.
	JS jetstream.JetStream
	// Log receives the gateway's logs (a zero Logger discards them).
	Log zerolog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Registry takes the gateway's metrics and is what /metrics serves;
	// nil makes one with the Go and process collectors
	// (observe.NewRegistry).
	Registry *prometheus.Registry
}

// Gateway is one gateway instance. Build it with New, then Run or Serve it
// once.
type Gateway struct {
	cfg     Config
	log     zerolog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	auth    *auth.Authenticator
	roster  *roster.Roster
	handler *httpapi.Handler
	natsAPI *natsapi.API
	// pins hashes the files of "pin" inputs; its Run stops the hashes
	// under way at shutdown.
	pins *admission.Pinner
	// parents publishes the events of the fan-out parents whose children
	// a cancel ended.
	parents *events.Parents
	// scaled are the latest scale requests heard, for /v1/stats.
	scaled *scaling.Log
	// timeouts are the HTTP server's; tests shorten them.
	timeouts serverTimeouts
	// tenantLimit and ipLimit are the rate limiters (nil = off).
	tenantLimit, ipLimit *ratelimit.Limiter
	// sharer makes the limits count across gateway replicas.
	sharer *ratelimit.Sharer
}

// New validates cfg and wires a gateway from deps. It starts nothing.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if deps.Store == nil {
		return nil, errors.New("gateway: Deps.Store is required")
	}
	if deps.NC == nil {
		return nil, errors.New("gateway: Deps.NC is required")
	}
	if deps.JS == nil {
		js, err := jetstream.New(deps.NC)
		if err != nil {
			return nil, fmt.Errorf("gateway: jetstream: %w", err)
		}
		deps.JS = js
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Registry == nil {
		deps.Registry = observe.NewRegistry()
	}
	reg := deps.Registry
	m, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := metrics.RegisterActiveJobs(reg, deps.Store.Stats, 0, 0, nil); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	au, err := auth.Parse(cfg.APITokens)
	if err != nil {
		return nil, fmt.Errorf("gateway: SLUICE_API_TOKENS: %w", err)
	}
	ops, err := operators(au, cfg.OperatorTenants)
	if err != nil {
		return nil, fmt.Errorf("gateway: SLUICE_GATEWAY_OPERATOR_TENANTS: %w", err)
	}
	caps := store.Caps{Global: cfg.MaxActive, Tenant: cfg.TenantMaxActive, TenantItems: cfg.TenantMaxItems}
	// HTTP and NATS accept the same batches: what the NATS server carries.
	batchBytes := cfg.BatchBytes(deps.NC.MaxPayload())
	if batchBytes < cfg.MaxBatchBytes {
		deps.Log.Warn().Int64("max_payload", deps.NC.MaxPayload()).Int64("batch_bytes", batchBytes).
			Msg("the NATS server's max_payload cannot carry SLUICE_GATEWAY_MAX_BATCH_BYTES: batches are bounded lower, over HTTP and NATS alike")
	}
	weights, err := admission.ParseWeights(cfg.TenantWeights)
	if err != nil {
		return nil, fmt.Errorf("gateway: SLUICE_GATEWAY_TENANT_WEIGHTS: %w", err)
	}
	// One log of recent 429s for both transports, shown in /v1/stats.
	rejected := rejections.New(contracts.MaxRecentRejections, deps.Now)
	scaled := &scaling.Log{}
	parents := events.NewParents(deps.Store, events.NewPublisher(deps.NC), 0)
	pub := events.NewPublisher(deps.NC).WithChildren(parents.Touch)
	pinRoots, err := confine.New(cfg.PinRoots)
	if err != nil {
		return nil, fmt.Errorf("gateway: SLUICE_PIN_ROOTS: %w", err)
	}
	pins := admission.NewPinner(pinRoots, admission.PinLimits{
		MaxBytes: cfg.MaxPinBytes, MaxPins: cfg.MaxPins, TenantMaxPins: cfg.TenantMaxPins,
		Rate: cfg.RateLimitTenantPin, Burst: cfg.RateLimitTenantPinBurst,
		CacheEntries: cfg.PinCacheEntries, RetryAfter: cfg.RetryAfter,
	}, deps.Now)
	// One per-tenant limiter serves HTTP and NATS alike.
	shared := cfg.RateLimitShare > 0
	tenantLimit := ratelimit.New(cfg.RateLimitTenant, cfg.RateLimitTenantBurst, ratelimit.Options{Now: deps.Now, Shared: shared})
	ros := roster.New(deps.Now)
	admitter := admission.New(deps.Store, deps.JS, pub, admission.Settings{
		Caps: caps,
		Limits: contracts.Limits{MaxDispatchDeadline: cfg.DispatchDeadline, DefaultMaxAttempts: cfg.DefaultMaxAttempts,
			DefaultStallTimeout: cfg.DefaultStallTimeout, MaxRuntime: cfg.MaxRuntime},
		RetryAfter: cfg.RetryAfter,
		Rejections: rejected,
		Kinds:      cleanKinds(cfg.Kinds),
		Weights:    weights,
		// Every hop of a job travels on NATS: refuse what it cannot carry.
		MaxMessageBytes:    deps.NC.MaxPayload(),
		MaxBodyBytes:       cfg.MaxBodyBytes,
		MaxBatchBytes:      batchBytes,
		MaxItemsPerRequest: cfg.MaxItemsPerRequest,
		TenantLimit:        tenantLimit,
		Pins:               pins,
		Workers:            ros.Workers,
	}, deps.Now, deps.Log, m)

	probe := observe.NewProbe(deps.Log, nil)
	probe.AddCheck("store", deps.Store.Ping)
	nc, js := deps.NC, deps.JS
	probe.AddCheck("nats", func(ctx context.Context) error { return bus.Check(ctx, nc, js) })

	// Reads have buckets of their own, limited by each replica alone.
	readLimit := ratelimit.New(cfg.RateLimitTenantRead, cfg.RateLimitTenantReadBurst, ratelimit.Options{Now: deps.Now})
	ipLimit := ratelimit.New(cfg.RateLimitIP, cfg.RateLimitIPBurst, ratelimit.Options{Now: deps.Now, Shared: shared})
	// The replicas' buckets count together (SLUICE_GATEWAY_RATE_LIMIT_SHARE).
	sharer := ratelimit.NewSharer(deps.NC, uuid.NewString(), cfg.RateLimitShare, map[string]*ratelimit.Limiter{
		contracts.LimitTenantRate: tenantLimit, contracts.LimitIPRate: ipLimit,
	}, deps.Log)

	proxies, err := httpapi.ParseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("gateway: SLUICE_GATEWAY_TRUSTED_PROXIES: %w", err)
	}

	g := &Gateway{
		pins:     pins,
		parents:  parents,
		scaled:   scaled,
		cfg:      cfg,
		log:      deps.Log,
		nc:       deps.NC,
		js:       deps.JS,
		auth:     au,
		roster:   ros,
		timeouts: defaultServerTimeouts,

		tenantLimit: tenantLimit,
		ipLimit:     ipLimit,
		sharer:      sharer,
		handler: httpapi.New(httpapi.Deps{
			Store:          deps.Store,
			Admitter:       admitter,
			Canceller:      cancel.New(deps.Store, deps.NC, pub, deps.Now, deps.Log),
			Auth:           au,
			Roster:         ros,
			Probe:          probe,
			Metrics:        m,
			Gatherer:       reg,
			Log:            deps.Log,
			MaxBodyBytes:   cfg.MaxBodyBytes,
			MaxBatchBytes:  batchBytes,
			Caps:           caps,
			TenantLimit:    tenantLimit,
			IPLimit:        ipLimit,
			TrustedProxies: proxies,
			Rejections:     rejected,
			Scaling:        scaled,
			JS:             deps.JS,

			TenantReadLimit:  readLimit,
			Operators:        ops,
			MetricsAuth:      cfg.MetricsAuth,
			MaxStreams:       cfg.MaxStreams,
			TenantMaxStreams: cfg.TenantMaxStreams,
		}),
		// The NATS API lets through the larger of the two bounds; the
		// admission applies each to its endpoint.
		natsAPI: natsapi.New(deps.NC, admitter, au, max(cfg.MaxBodyBytes, batchBytes), deps.Log,
			natsapi.Options{TenantLimit: tenantLimit, Metrics: m, Rejections: rejected}),
	}
	return g, nil
}

// Handler is the HTTP API (with /healthz, /readyz and /metrics) as one
// handler, for tests and for embedding under another server.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Run listens on cfg.HTTPAddr and serves until ctx ends (see Serve).
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", g.cfg.HTTPAddr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve runs the HTTP API on ln, the NATS submit endpoint and the worker
// roster subscription until ctx ends or one of them fails, then shuts all
// of them down (the HTTP server gracefully, within SLUICE_SHUTDOWN_TIMEOUT)
// and returns the first error. It closes ln.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	if g.auth.Open() {
		g.log.Warn().Msg("SLUICE_API_TOKENS is empty: the API is open and every request acts as tenant \"default\"")
	} else {
		g.log.Info().Strs("tenants", g.auth.Tenants()).Msg("API tokens configured")
		if g.cfg.MetricsAuth && len(g.cfg.OperatorTenants) == 0 {
			g.log.Warn().Msg("no SLUICE_GATEWAY_OPERATOR_TENANTS: no token can read /metrics (SLUICE_GATEWAY_METRICS_AUTH)")
		}
	}
	g.ensureStream(ctx)
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		return g.serveHTTP(ctx, ln)
	})
	eg.Go(func() error { return g.natsAPI.Serve(ctx) })
	eg.Go(func() error { return g.pins.Run(ctx) })
	eg.Go(func() error { return g.parents.Run(ctx) })
	eg.Go(func() error { return g.scaled.Listen(ctx, g.nc) })
	eg.Go(func() error { return g.sharer.Run(ctx) })
	eg.Go(func() error {
		if err := g.roster.Subscribe(ctx, g.nc); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	g.log.Info().Str("addr", ln.Addr().String()).Str(observe.FieldSubject, contracts.SubjectSubmit).
		Int("max_active", g.cfg.MaxActive).Int("tenant_max_active", g.cfg.TenantMaxActive).
		Msg("gateway serving")
	err := eg.Wait()
	g.log.Info().Msg("gateway stopped")
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// ensureStream creates the job stream if it is missing, so readiness holds
// before any scheduler starts. A failure is only logged: publishing
// recreates the stream too, and the store keeps every admitted job.
func (g *Gateway) ensureStream(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, streamSetupTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(sctx, g.js); err != nil {
		g.log.Warn().Err(err).Msg("job stream not ensured at startup")
	}
	if _, err := events.EnsureStream(sctx, g.js); err != nil {
		g.log.Warn().Err(err).Msg("event stream not ensured at startup; event readers create it")
	}
}

// serveHTTP serves the HTTP API on ln with the gateway's timeouts until
// ctx ends, then shuts down gracefully within SLUICE_SHUTDOWN_TIMEOUT.
func (g *Gateway) serveHTTP(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: g.timeouts.readHeader,
		ReadTimeout:       g.timeouts.read,
		WriteTimeout:      g.timeouts.write,
		IdleTimeout:       g.timeouts.idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// cleanKinds trims the kinds of SLUICE_GATEWAY_KINDS and drops empty ones.
func cleanKinds(in []string) []string {
	var out []string
	for _, k := range in {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}
