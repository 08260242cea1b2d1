package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/httpapi"
)

// Config is the gateway's whole configuration, read from SLUICE_*
// environment variables (Go duration syntax for durations).
type Config struct {
	// Bus is the NATS connection (SLUICE_NATS_*); an empty URL embeds a server.
	Bus bus.Env
	// Store is the job store (SLUICE_STORE, SLUICE_DATA_DIR).
	Store dial.Env
	// Log is the logger (SLUICE_LOG_LEVEL, SLUICE_LOG_FORMAT).
	Log observe.Env

	// HTTPAddr is where the HTTP API listens.
	HTTPAddr string `env:"SLUICE_HTTP_ADDR" envDefault:"127.0.0.1:8080" doc:"Where the HTTP API (and the dashboard, /healthz, /readyz, /metrics) listens: host:port."`
	// MaxActive caps pending + running jobs across all tenants; 0 = no cap.
	MaxActive int `env:"SLUICE_MAX_ACTIVE" envDefault:"1000" doc:"The most active (pending + running) jobs of all tenants together; past it a submit is refused with 429 (limit global). 0 = no cap."`
	// TenantMaxActive caps pending + running jobs per tenant; 0 = no cap.
	TenantMaxActive int `env:"SLUICE_TENANT_MAX_ACTIVE" envDefault:"0" doc:"The most active (pending + running) jobs of one tenant; past it a submit is refused with 429 (limit tenant). 0 = no cap."`
	// TenantWeights is "tenant:weight,…": the tenants' shares in fair
	// queuing (a tenant not listed has weight 1).
	TenantWeights string `env:"SLUICE_GATEWAY_TENANT_WEIGHTS" envOld:"SLUICE_TENANT_WEIGHTS" doc:"tenant:weight,…: the tenants' shares when they take turns for workers (fair queuing); a tenant not listed has weight 1."`
	// APITokens is "tenant:token,…"; empty runs the API open (one
	// "default" tenant). It is secret: never log or print it.
	APITokens string `env:"SLUICE_API_TOKENS" json:"-" doc:"tenant:token,…: the API tokens and the tenant each acts as (token mode). Empty runs the API open: every request is tenant default. Secret."`
	// OperatorTenants lists tenants of SLUICE_API_TOKENS whose
	// tokens see the whole system in GET /v1/stats (every tenant's counts,
	// the workers, every rejection and scale request). Every other tenant
	// sees only its own. Empty: no token sees other tenants (open mode
	// shows everything anyway).
	OperatorTenants []string `env:"SLUICE_GATEWAY_OPERATOR_TENANTS" envOld:"SLUICE_OPERATOR_TENANTS" envSeparator:"," doc:"Tenants of SLUICE_API_TOKENS whose tokens see the whole system in GET /v1/stats (every tenant, the workers, every rejection and scale request); any other tenant sees only its own."`
	// MetricsAuth makes GET /metrics, in token mode, need the token of an
	// operator (OperatorTenants): the metrics show every tenant's
	// activity. Open mode serves /metrics to anyone whatever it says.
	MetricsAuth bool `env:"SLUICE_GATEWAY_METRICS_AUTH" envDefault:"true" doc:"In token mode, GET /metrics needs the token of a tenant of SLUICE_GATEWAY_OPERATOR_TENANTS (401 without a valid token, 403 with another tenant's): the metrics show every tenant's activity. false serves it to anyone. Open mode serves it to anyone."`
	// DispatchDeadline is the longest a job may wait for a worker, and the
	// deadline of a job that asks for none.
	DispatchDeadline time.Duration `env:"SLUICE_DISPATCH_DEADLINE" envDefault:"10m" doc:"The longest a job may wait for a worker, and the dispatch deadline of a job that asks for none."`
	// DefaultMaxAttempts is the max_attempts of a job that asks for none.
	DefaultMaxAttempts int `env:"SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS" envOld:"SLUICE_MAX_ATTEMPTS" envDefault:"3" doc:"The max_attempts of a job that asks for none."`
	// DefaultStallTimeout is the stall_timeout of a job that asks for
	// none: its worker stops a run with no progress for that long; 0 = off.
	DefaultStallTimeout time.Duration `env:"SLUICE_GATEWAY_DEFAULT_STALL_TIMEOUT" envOld:"SLUICE_STALL_TIMEOUT" envDefault:"0s" doc:"The stall_timeout of a job that asks for none: its worker stops a run that reports no progress for that long. 0 = off."`
	// MaxRuntime bounds a job's max_runtime; 0 = no bound. The schedulers
	// fail a run past it, whatever the job asked.
	MaxRuntime time.Duration `env:"SLUICE_MAX_RUNTIME" envDefault:"0s" doc:"The longest any run may take: the gateway bounds a job's max_runtime by it, the schedulers and the reaper fail a run past it, whatever the job asked. 0 = no bound."`
	// RetryAfter is what a rejected client is told to wait (Retry-After).
	RetryAfter time.Duration `env:"SLUICE_GATEWAY_RETRY_AFTER" envOld:"SLUICE_RETRY_INTERVAL" envNow:"SLUICE_RETRY_INTERVAL:the scheduler's re-offer period" envDefault:"2s" doc:"What a refused client (429, 503) is told to wait before it tries again: the Retry-After header."`
	// MaxBodyBytes bounds a submit request body, over HTTP and NATS.
	MaxBodyBytes int64 `env:"SLUICE_GATEWAY_MAX_BODY_BYTES" envOld:"SLUICE_MAX_BODY_BYTES" envDefault:"1048576" doc:"The largest submit body, over HTTP and NATS (413 past it)."`
	// MaxBatchBytes bounds a batch submit's body, over HTTP and NATS alike:
	// an embedded NATS server's max_payload is raised to carry it; with an
	// outside server, both transports take the smaller of the two.
	MaxBatchBytes int64 `env:"SLUICE_GATEWAY_MAX_BATCH_BYTES" envOld:"SLUICE_MAX_BATCH_BYTES" envDefault:"1048576" doc:"The largest batch submit body, over HTTP and NATS alike. An embedded NATS server's max_payload is raised to carry it; with an outside server both transports take the smaller of the two."`
	// MaxItemsPerRequest bounds the items of one request, HTTP or NATS,
	// counted before the body is decoded: each job of a batch is one, and
	// each item of a fan-out one more. It bounds how long one request
	// holds the store's writer.
	MaxItemsPerRequest int `env:"SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST" envOld:"SLUICE_MAX_ITEMS_PER_REQUEST" envDefault:"10000" doc:"The most items one request may hold (each job of a batch is one, each item of a fan-out one more); more is a 413 naming request_items."`
	// TenantMaxItems bounds a tenant's items in flight: its active
	// jobs, each fan-out counting one plus its items until it ends; 0 = no
	// bound. Checked in the same atomic step as TenantMaxActive.
	TenantMaxItems int `env:"SLUICE_GATEWAY_TENANT_MAX_ITEMS" envOld:"SLUICE_TENANT_MAX_ITEMS" envDefault:"100000" doc:"The most items one tenant may have in flight: its active jobs, each fan-out counting one plus its items until it ends; past it 429 (limit tenant_items). 0 = no bound."`
	// Kinds lists the job kinds the gateway admits; empty admits any. A
	// job of another kind is refused with 422 instead of waiting for a
	// worker that will never come.
	Kinds []string `env:"SLUICE_GATEWAY_KINDS" envOld:"SLUICE_KINDS" envSeparator:"," doc:"The job kinds the gateway admits; a job of another kind is refused with 422 instead of waiting for a worker that never comes. Empty admits any kind."`
	// ShutdownTimeout bounds the graceful shutdown of the HTTP server.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"How long a stopping service (SIGINT, SIGTERM) lets the work in flight finish: requests, offers, results, running handlers, a sweep. What is still running then is cancelled (a worker's jobs go back to the queue)."`

	// MaxStreams bounds the open event streams (GET /v1/events and GET
	// /v1/jobs/{id}/events) of one gateway; past it a stream is refused
	// with 503.
	MaxStreams int `env:"SLUICE_GATEWAY_MAX_STREAMS" envOld:"SLUICE_MAX_STREAMS" envDefault:"1000" doc:"The most open event streams (GET /v1/events, GET /v1/jobs/{id}/events) of one gateway; past it a stream is refused with 503."`
	// TenantMaxStreams is one tenant's share of MaxStreams; past it the
	// tenant's next stream is refused with 429 (limit tenant_streams), so
	// one tenant never takes every stream.
	TenantMaxStreams int `env:"SLUICE_GATEWAY_TENANT_MAX_STREAMS" envOld:"SLUICE_TENANT_MAX_STREAMS" envDefault:"100" doc:"One tenant's share of SLUICE_GATEWAY_MAX_STREAMS; past it the tenant's next stream is refused with 429 (limit tenant_streams)."`

	// RateLimitTenant is the token-bucket rate of submits and cancels
	// (HTTP and NATS) per tenant, in tokens per second; 0 = off. A cancel
	// costs one token, a submit one per job and per fan-out item (a batch
	// of 1,000 jobs costs 1,000). The read routes have a bucket of their
	// own (RateLimitTenantRead).
	RateLimitTenant float64 `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT" envOld:"SLUICE_RATE_LIMIT_TENANT" envDefault:"2000" doc:"Submits and cancels (HTTP and NATS) per tenant, in tokens per second: a cancel costs one token, a submit one per job and per fan-out item. 0 = off."`
	// RateLimitTenantBurst is the per-tenant bucket size: also the most a
	// single request may cost (a costlier one is refused with 413).
	RateLimitTenantBurst int `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST" envOld:"SLUICE_RATE_LIMIT_TENANT_BURST" envDefault:"20000" doc:"The per-tenant bucket size: also the most one request may cost (a costlier one is refused with 413)."`
	// RateLimitTenantRead is the token-bucket rate of the authenticated
	// HTTP read routes (GET /v1/jobs, /v1/jobs/{id}, the event streams,
	// /v1/stats) per tenant, in requests per second; 0 = off. Health,
	// readiness, metrics and the dashboard's page are never rate limited.
	RateLimitTenantRead float64 `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ" envOld:"SLUICE_RATE_LIMIT_TENANT_READ" envDefault:"200" doc:"The HTTP read routes (GET /v1/jobs, /v1/jobs/{id}, the event streams, /v1/stats) per tenant, in requests per second. Health, readiness, metrics and the dashboard's page are never limited. 0 = off."`
	// RateLimitTenantReadBurst is the per-tenant read bucket size.
	RateLimitTenantReadBurst int `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST" envOld:"SLUICE_RATE_LIMIT_TENANT_READ_BURST" envDefault:"400" doc:"The per-tenant read bucket size."`
	// RateLimitIP is the token-bucket rate of HTTP submits and cancels,
	// and of the other requests that fail authentication (reads,
	// /metrics), per client IP (the connection's address, or
	// X-Forwarded-For when the connection comes from TrustedProxies; an
	// IPv6 client counts by its /64), in requests per second; 0 = off.
	RateLimitIP float64 `env:"SLUICE_GATEWAY_RATE_LIMIT_IP" envOld:"SLUICE_RATE_LIMIT_IP" envDefault:"100" doc:"HTTP submits and cancels, and any other request that fails authentication (reads, /metrics), per client IP (X-Forwarded-For from SLUICE_GATEWAY_TRUSTED_PROXIES only; an IPv6 client counts by its /64), in requests per second. 0 = off."`
	// RateLimitIPBurst is the per-IP bucket size.
	RateLimitIPBurst int `env:"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST" envOld:"SLUICE_RATE_LIMIT_IP_BURST" envDefault:"200" doc:"The per-IP bucket size."`
	// RateLimitShare is how often a gateway tells the others what its rate
	// limits let through, so that the limits hold across replicas (each
	// answers from its own buckets; the others count it within about this
	// interval). 0 = every gateway limits alone.
	RateLimitShare time.Duration `env:"SLUICE_GATEWAY_RATE_LIMIT_SHARE" envOld:"SLUICE_RATE_LIMIT_SHARE" envDefault:"100ms" doc:"How often a gateway tells the others what its rate limits let through, so that the limits hold across replicas. 0 = every gateway limits alone."`
	// TrustedProxies are the CIDRs (or addresses) of the load balancers in
	// front of the gateway: from these peers only, the client's address is
	// read from X-Forwarded-For. Empty trusts no one.
	TrustedProxies []string `env:"SLUICE_GATEWAY_TRUSTED_PROXIES" envOld:"SLUICE_TRUSTED_PROXIES" envSeparator:"," doc:"CIDRs or addresses of the load balancers in front of the gateway: from these peers only, the client's address is read from X-Forwarded-For. Empty trusts no one."`

	// PinRoots are the directories (absolute, existing) under which the
	// gateway hashes the file of a "pin" input; empty turns pinning off.
	// Only regular files are read, once symbolic links are resolved.
	PinRoots []string `env:"SLUICE_PIN_ROOTS" envSeparator:"," doc:"Directories (absolute, existing) under which the gateway hashes the file of a pin input (regular files only, symbolic links resolved). Empty turns pinning off."`
	// MaxPinBytes bounds the bytes read to pin one file.
	MaxPinBytes int64 `env:"SLUICE_GATEWAY_MAX_PIN_BYTES" envOld:"SLUICE_PIN_MAX_BYTES" envDefault:"1073741824" doc:"The most bytes read to pin one file."`
	// MaxPins bounds the files the gateway hashes at once for pins, all
	// tenants together; past it a pin that must read its file is refused
	// with 503. A pin answered from the digest cache reads nothing and
	// takes no place.
	MaxPins int `env:"SLUICE_GATEWAY_MAX_PINS" envDefault:"4" doc:"The most files the gateway hashes at once for pins (sha256 pin), all tenants together; past it a pin that must read its file is refused with 503 and Retry-After. A pin of a file unchanged since its last hash reads nothing and is not counted."`
	// TenantMaxPins is one tenant's share of MaxPins; past it the
	// tenant's next pin that must read its file is refused with 429
	// (limit tenant_pins).
	TenantMaxPins int `env:"SLUICE_GATEWAY_TENANT_MAX_PINS" envDefault:"1" doc:"One tenant's share of SLUICE_GATEWAY_MAX_PINS; past it the tenant's next pin that must read its file is refused with 429 and Retry-After (limit tenant_pins)."`
	// RateLimitTenantPin is the bytes per second one tenant's pins read
	// (and hash) together, all of its hashes under way sharing it; 0 =
	// not paced. A pin over it is not refused: its read waits.
	RateLimitTenantPin float64 `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN" envDefault:"67108864" doc:"Bytes per second one tenant's pins read and hash, all of its hashes under way together: a read faster than that waits (the request's context bounds the wait). A pin of N bytes then takes about (N - burst) / rate. 0 = not paced."`
	// RateLimitTenantPinBurst is how many bytes a tenant's pins read
	// before RateLimitTenantPin paces them.
	RateLimitTenantPinBurst int `env:"SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN_BURST" envDefault:"16777216" doc:"The per-tenant pin byte bucket: how many bytes a tenant's pins read at full speed before SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN paces them."`
	// PinCacheEntries bounds the digests the gateway keeps of the files
	// it hashed, so that a pin of an unchanged file costs a stat; 0 =
	// none kept.
	PinCacheEntries int `env:"SLUICE_GATEWAY_PIN_CACHE_ENTRIES" envDefault:"10000" doc:"How many digests of pinned files the gateway keeps (least recently used dropped first): a pin of a file whose device, inode, size, mtime and ctime have not changed since it was hashed costs a stat, not a read. 0 = none kept."`

	// Deprecated lists the former variable names found set, for the
	// binary to log (see envconfig.Deprecation).
	Deprecated []envconfig.Deprecation `env:"-" json:"-"`
}

// maxPinBytes is the largest SLUICE_GATEWAY_MAX_PIN_BYTES accepted.
const maxPinBytes = 1 << 40

// maxPinCacheEntries is the largest SLUICE_GATEWAY_PIN_CACHE_ENTRIES
// accepted (an entry is about 200 bytes).
const maxPinCacheEntries = 10_000_000

// maxBodyLimit is the largest SLUICE_GATEWAY_MAX_BODY_BYTES accepted.
const maxBodyLimit = 64 << 20

// natsHeaderRoom is what a NATS message needs beside its body: its
// headers (the API token, the tenant) count in max_payload.
const natsHeaderRoom = 64 << 10

// maxBatchLimit is the largest SLUICE_GATEWAY_MAX_BATCH_BYTES accepted: the body
// and its headers must fit the largest max_payload NATS accepts.
const maxBatchLimit = 64<<20 - natsHeaderRoom

// maxItemsLimit is the largest SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST accepted: a
// batch of the most jobs, each a fan-out of the most items.
const maxItemsLimit = contracts.MaxBatchJobs * (1 + contracts.MaxItems)

// maxRateBurst is the largest rate-limit burst accepted.
const maxRateBurst = 1 << 30

// NATSMaxPayload is the max_payload an embedded NATS server needs so that
// the largest request the HTTP API accepts (SLUICE_GATEWAY_MAX_BATCH_BYTES,
// SLUICE_GATEWAY_MAX_BODY_BYTES) can come over NATS too, with its headers.
func (c Config) NATSMaxPayload() int32 {
	return int32(min(max(c.MaxBodyBytes, c.MaxBatchBytes)+natsHeaderRoom, 64<<20))
}

// BatchBytes is the batch body bound both transports apply on a NATS
// connection whose server carries at most maxPayload bytes:
// SLUICE_GATEWAY_MAX_BATCH_BYTES, or less when the server cannot carry that.
func (c Config) BatchBytes(maxPayload int64) int64 {
	if maxPayload > natsHeaderRoom && maxPayload-natsHeaderRoom < c.MaxBatchBytes {
		return maxPayload - natsHeaderRoom
	}
	return c.MaxBatchBytes
}

// TokenAuth resolves API tokens to tenants, for an embedded NATS server
// that must let in only the tenants of SLUICE_API_TOKENS (token mode); nil
// in open mode.
func (c Config) TokenAuth() func(token string) (string, bool) {
	a, err := auth.Parse(c.APITokens)
	if err != nil || a.Open() {
		return nil
	}
	return a.Lookup
}

// LoadConfig reads the configuration from environ (the process environment
// when nil), fills the defaults and validates it. Errors name the variable.
func LoadConfig(environ map[string]string) (Config, error) {
	var cfg Config
	deprecated, err := envconfig.Parse(&cfg, environ)
	if err != nil {
		return Config{}, err
	}
	cfg.Deprecated = deprecated
	if err := envconfig.Explain(cfg.Validate(), deprecated); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// DefaultConfig is the configuration with every variable unset.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the gateway's binary needs before it builds the gateway:
// NATS, the logger and the store.
func (c Config) Common() service.Common {
	return service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.Store.DataDir, TokenAuth: c.TokenAuth(), MaxPayload: c.NATSMaxPayload(), Deprecated: c.Deprecated,
		OpenStore: func(ctx context.Context, retry func(error, time.Duration)) (store.Store, error) {
			return dial.OpenRetry(ctx, c.Store, retry)
		}}
}

// Validate checks every setting; its errors name the variable at fault.
// It never prints a token.
func (c Config) Validate() error {
	var p envconfig.Problems
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		p.Add("SLUICE_HTTP_ADDR", "%q is not host:port", c.HTTPAddr)
	}
	envconfig.NotNegative(&p, "SLUICE_MAX_ACTIVE", c.MaxActive, "no cap")
	envconfig.NotNegative(&p, "SLUICE_TENANT_MAX_ACTIVE", c.TenantMaxActive, "no cap")
	if _, err := admission.ParseWeights(c.TenantWeights); err != nil {
		p.Wrap("SLUICE_GATEWAY_TENANT_WEIGHTS", err)
	}
	if au, err := auth.Parse(c.APITokens); err != nil {
		p.Wrap("SLUICE_API_TOKENS", err)
	} else if _, err := operators(au, c.OperatorTenants); err != nil {
		p.Wrap("SLUICE_GATEWAY_OPERATOR_TENANTS", err)
	}
	envconfig.Positive(&p, "SLUICE_GATEWAY_MAX_STREAMS", c.MaxStreams)
	if c.TenantMaxStreams < 1 || c.TenantMaxStreams > max(c.MaxStreams, 1) {
		p.Add("SLUICE_GATEWAY_TENANT_MAX_STREAMS", "must be between 1 and SLUICE_GATEWAY_MAX_STREAMS (%d), got %d", c.MaxStreams, c.TenantMaxStreams)
	}
	envconfig.Between(&p, "SLUICE_GATEWAY_DEFAULT_STALL_TIMEOUT", c.DefaultStallTimeout, 0, contracts.MaxRunLimit)
	envconfig.NotNegative(&p, "SLUICE_MAX_RUNTIME", c.MaxRuntime, "no bound")
	envconfig.Positive(&p, "SLUICE_DISPATCH_DEADLINE", c.DispatchDeadline)
	envconfig.Between(&p, "SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS", c.DefaultMaxAttempts, 1, contracts.MaxMaxAttempts)
	envconfig.Positive(&p, "SLUICE_GATEWAY_RETRY_AFTER", c.RetryAfter)
	envconfig.Between(&p, "SLUICE_GATEWAY_MAX_BODY_BYTES", c.MaxBodyBytes, 1, maxBodyLimit)
	envconfig.Between(&p, "SLUICE_GATEWAY_MAX_BATCH_BYTES", c.MaxBatchBytes, 1, maxBatchLimit)
	envconfig.Between(&p, "SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST", c.MaxItemsPerRequest, 1, maxItemsLimit)
	envconfig.NotNegative(&p, "SLUICE_GATEWAY_TENANT_MAX_ITEMS", c.TenantMaxItems, "no bound")
	for _, k := range c.Kinds {
		if !contracts.ValidKind(strings.TrimSpace(k)) {
			p.Add("SLUICE_GATEWAY_KINDS", "%q is not a valid kind", k)
		}
	}
	envconfig.Positive(&p, "SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	// rateLimit checks a rate of units per second and its burst.
	rateLimit := func(rateVar, units string, perSecond float64, burstVar string, burst int) {
		if math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond < 0 {
			p.Add(rateVar, "must be 0 (off) or a positive number of %s per second, got %v", units, perSecond)
			return
		}
		if burst < 0 || burst > maxRateBurst || (perSecond > 0 && burst < 1) {
			p.Add(burstVar, "must be between 1 and %d (0 allowed only while %s is 0), got %d", maxRateBurst, rateVar, burst)
		}
	}
	rateLimit("SLUICE_GATEWAY_RATE_LIMIT_TENANT", "requests", c.RateLimitTenant, "SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST", c.RateLimitTenantBurst)
	rateLimit("SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ", "requests", c.RateLimitTenantRead, "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ_BURST", c.RateLimitTenantReadBurst)
	rateLimit("SLUICE_GATEWAY_RATE_LIMIT_IP", "requests", c.RateLimitIP, "SLUICE_GATEWAY_RATE_LIMIT_IP_BURST", c.RateLimitIPBurst)
	envconfig.Between(&p, "SLUICE_GATEWAY_RATE_LIMIT_SHARE", c.RateLimitShare, 0, time.Minute)
	if _, err := httpapi.ParseProxies(c.TrustedProxies); err != nil {
		p.Wrap("SLUICE_GATEWAY_TRUSTED_PROXIES", err)
	}
	if _, err := confine.New(c.PinRoots); err != nil {
		p.Wrap("SLUICE_PIN_ROOTS", err)
	}
	envconfig.Between(&p, "SLUICE_GATEWAY_MAX_PIN_BYTES", c.MaxPinBytes, 1, maxPinBytes)
	envconfig.Positive(&p, "SLUICE_GATEWAY_MAX_PINS", c.MaxPins)
	if c.TenantMaxPins < 1 || c.TenantMaxPins > max(c.MaxPins, 1) {
		p.Add("SLUICE_GATEWAY_TENANT_MAX_PINS", "must be between 1 and SLUICE_GATEWAY_MAX_PINS (%d), got %d", c.MaxPins, c.TenantMaxPins)
	}
	rateLimit("SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN", "bytes", c.RateLimitTenantPin, "SLUICE_GATEWAY_RATE_LIMIT_TENANT_PIN_BURST", c.RateLimitTenantPinBurst)
	envconfig.Between(&p, "SLUICE_GATEWAY_PIN_CACHE_ENTRIES", c.PinCacheEntries, 0, maxPinCacheEntries)
	p.Include(c.Store.Validate())
	p.Include(c.Bus.Validate())
	return p.Err()
}

// operators reads SLUICE_GATEWAY_OPERATOR_TENANTS: tenants of SLUICE_API_TOKENS
// (a name no token has would be a typo that silently hides everything).
// Open mode takes none: every request there is the operator already.
func operators(au *auth.Authenticator, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	known := map[string]bool{}
	for _, t := range au.Tenants() {
		known[t] = true
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case au.Open():
			return nil, errors.New("names operators, but SLUICE_API_TOKENS is empty (open mode: every request sees everything)")
		case !known[n]:
			return nil, fmt.Errorf("%q is not a tenant of SLUICE_API_TOKENS", n)
		}
		out[n] = true
	}
	return out, nil
}
