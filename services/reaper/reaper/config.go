package reaper

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
)

// Config is everything the reaper reads from the environment.
type Config struct {
	// Bus, Store and Log are the settings every service shares.
	Bus   bus.Env
	Store dial.Env
	Log   observe.Env

	// StaleThreshold is the heartbeat age that makes a running job stale.
	StaleThreshold time.Duration `env:"SLUICE_STALE_THRESHOLD" envDefault:"30s" doc:"The heartbeat age that makes a running job stale: the schedulers and the reaper give its run up, and a worker stops a run whose heartbeats went unacknowledged for 2/3 of it. Must exceed twice SLUICE_HEARTBEAT_INTERVAL."`
	// Interval is the time between sweeps; 0 = a third of the stale threshold.
	Interval time.Duration `env:"SLUICE_REAPER_INTERVAL" envDefault:"0s" doc:"The time between two sweeps. 0 = a third of SLUICE_STALE_THRESHOLD, between 100ms and 30s."`
	// MaxRuntime fails jobs running longer; 0 = no limit.
	MaxRuntime time.Duration `env:"SLUICE_MAX_RUNTIME" envDefault:"0s" doc:"The longest any run may take: the gateway bounds a job's max_runtime by it, the schedulers and the reaper fail a run past it, whatever the job asked. 0 = no bound."`
	// Retention keeps finished jobs this long before purging; 0 = forever.
	Retention time.Duration `env:"SLUICE_REAPER_RETENTION" envOld:"SLUICE_RETENTION" envDefault:"168h" doc:"How long a finished job is kept before it is purged. 0 = forever."`
	// MaxBatch bounds one query or one purge.
	MaxBatch int `env:"SLUICE_REAPER_MAX_BATCH" envOld:"SLUICE_REAPER_BATCH" envDefault:"500" doc:"The most jobs one query or one purge of a sweep handles (1 to 100000)."`
	// HTTPAddr serves /healthz, /readyz and /metrics; empty = none.
	HTTPAddr string `env:"SLUICE_REAPER_HTTP_ADDR" doc:"Where the reaper serves /healthz, /readyz and /metrics (host:port). Empty = not served."`
	// ShutdownTimeout bounds the drain on shutdown: a sweep in progress
	// when it begins may finish within it.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"How long a stopping service (SIGINT, SIGTERM) lets the work in flight finish: requests, offers, results, running handlers, a sweep. What is still running then is cancelled (a worker's jobs go back to the queue)."`

	// Deprecated lists the former variable names found set, for the
	// binary to log (see envconfig.Deprecation).
	Deprecated []envconfig.Deprecation `env:"-" json:"-"`
}

// DefaultConfig is the configuration with every variable unset.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the reaper's binary needs before it builds the reaper:
// NATS, the logger and the store.
func (c Config) Common() service.Common {
	return service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.Store.DataDir, Deprecated: c.Deprecated,
		OpenStore: func(ctx context.Context, retry func(error, time.Duration)) (store.Store, error) {
			return dial.OpenRetry(ctx, c.Store, retry)
		}}
}

// LoadConfig parses the environment (the process's when environ is nil),
// fills defaults and validates.
func LoadConfig(environ map[string]string) (Config, error) {
	var c Config
	deprecated, err := envconfig.Parse(&c, environ)
	if err != nil {
		return c, err
	}
	c.Deprecated = deprecated
	c = c.withDefaults()
	return c, envconfig.Explain(c.Validate(), deprecated)
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = min(max(c.StaleThreshold/3, 100*time.Millisecond), 30*time.Second)
	}
	return c
}

// Validate checks the settings and names the variable at fault.
func (c Config) Validate() error {
	var p envconfig.Problems
	envconfig.Positive(&p, "SLUICE_STALE_THRESHOLD", c.StaleThreshold)
	envconfig.NotNegative(&p, "SLUICE_REAPER_INTERVAL", c.Interval, "a third of SLUICE_STALE_THRESHOLD")
	envconfig.NotNegative(&p, "SLUICE_MAX_RUNTIME", c.MaxRuntime, "no bound")
	envconfig.NotNegative(&p, "SLUICE_REAPER_RETENTION", c.Retention, "forever")
	envconfig.Positive(&p, "SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	envconfig.Between(&p, "SLUICE_REAPER_MAX_BATCH", c.MaxBatch, 1, 100000)
	p.Include(c.Store.Validate())
	p.Include(c.Bus.Validate())
	return p.Err()
}
