package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/scheduler/internal/spawn"
)

// Config is everything the scheduler reads from the environment.
type Config struct {
	// Bus, Store and Log are the settings every service shares.
	Bus   bus.Env
	Store dial.Env
	Log   observe.Env

	// RetryInterval is how long a job whose offers all failed waits before
	// it is ready again (plus up to 25% jitter), and how often the
	// dispatcher looks for ready jobs when nothing woke it.
	RetryInterval time.Duration `env:"SLUICE_RETRY_INTERVAL" envDefault:"2s"`
	// RetryBackoff is the wait before a failed job's second run; it doubles
	// with every run (±50% jitter) up to RetryBackoffMax.
	RetryBackoff    time.Duration `env:"SLUICE_RETRY_BACKOFF" envDefault:"1s"`
	RetryBackoffMax time.Duration `env:"SLUICE_RETRY_BACKOFF_MAX" envDefault:"10m"`
	// StaleThreshold is the heartbeat age that makes a running job stale.
	StaleThreshold time.Duration `env:"SLUICE_STALE_THRESHOLD" envDefault:"30s"`
	// MaxRuntime fails a job running longer than this; 0 = no limit.
	MaxRuntime time.Duration `env:"SLUICE_MAX_RUNTIME" envDefault:"0s"`
	// OfferTimeout bounds one offer request to one worker.
	OfferTimeout time.Duration `env:"SLUICE_OFFER_TIMEOUT" envDefault:"1s"`
	// ClaimTTL is how long a dispatch claim keeps other schedulers off a job.
	ClaimTTL time.Duration `env:"SLUICE_CLAIM_TTL" envDefault:"30s"`
	// AckWait is JetStream's redelivery timer for an unacknowledged message.
	AckWait time.Duration `env:"SLUICE_ACK_WAIT" envDefault:"30s"`
	// Concurrency is how many due messages and results one scheduler
	// handles at once, and how many offers it has in flight.
	Concurrency int `env:"SLUICE_SCHEDULER_CONCURRENCY" envDefault:"64"`
	// NoWorkerGrace fails a pending job early, with "capacity: no worker
	// runs kind …", when no live worker has announced its kind for this
	// long (counted from the scheduler's start at the earliest); 0 = wait
	// for the dispatch deadline.
	NoWorkerGrace time.Duration `env:"SLUICE_NO_WORKER_GRACE" envDefault:"1m"`
	// Spawn is what a scale request does besides being published on
	// sluice.scale.request: "command" runs SpawnCommand, "dev" leaves it
	// to sluice dev (which starts a worker), empty does nothing more.
	Spawn string `env:"SLUICE_SPAWN"`
	// SpawnCommand is the argv (split on spaces) run per scale request
	// when Spawn is "command".
	SpawnCommand []string `env:"SLUICE_SPAWN_COMMAND" envSeparator:" "`
	// SpawnCooldown is the least time between two scale requests of a kind.
	SpawnCooldown time.Duration `env:"SLUICE_SPAWN_COOLDOWN" envDefault:"10s"`
	// SpawnMax bounds the spawned workers live or asked for; 0 = no scale
	// requests at all.
	SpawnMax int `env:"SLUICE_SPAWN_MAX" envDefault:"4"`
	// SpawnTimeout bounds one run of SpawnCommand.
	SpawnTimeout time.Duration `env:"SLUICE_SPAWN_TIMEOUT" envDefault:"30s"`
	// MinWorkerVersion makes the scheduler skip workers that announce an
	// older version (contracts.CompareVersions); empty = none skipped.
	MinWorkerVersion string `env:"SLUICE_MIN_WORKER_VERSION"`
	// HTTPAddr serves /healthz, /readyz and /metrics; empty = none.
	HTTPAddr string `env:"SLUICE_SCHEDULER_HTTP_ADDR"`
	// ShutdownTimeout bounds the drain on shutdown: offers, results and
	// heartbeats in flight when it begins may finish within it.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s"`
}

// DefaultConfig is the configuration with every variable unset.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the scheduler's binary needs before it builds the
// scheduler: NATS, the logger and the store.
func (c Config) Common() service.Common {
	return service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.Store.DataDir,
		OpenStore: func(ctx context.Context, retry func(error, time.Duration)) (store.Store, error) {
			return dial.OpenRetry(ctx, c.Store, retry)
		}}
}

// LoadConfig parses the environment (the process's when environ is nil),
// fills defaults and validates.
func LoadConfig(environ map[string]string) (Config, error) {
	var c Config
	if err := envconfig.Parse(&c, environ); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate checks the settings and names the variable at fault.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", name, d))
		}
	}
	pos("SLUICE_RETRY_INTERVAL", c.RetryInterval)
	pos("SLUICE_STALE_THRESHOLD", c.StaleThreshold)
	pos("SLUICE_OFFER_TIMEOUT", c.OfferTimeout)
	pos("SLUICE_CLAIM_TTL", c.ClaimTTL)
	pos("SLUICE_ACK_WAIT", c.AckWait)
	pos("SLUICE_RETRY_BACKOFF", c.RetryBackoff)
	pos("SLUICE_RETRY_BACKOFF_MAX", c.RetryBackoffMax)
	if c.RetryBackoff > 0 && c.RetryBackoffMax > 0 && c.RetryBackoffMax < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("SLUICE_RETRY_BACKOFF_MAX: %s is less than SLUICE_RETRY_BACKOFF (%s)", c.RetryBackoffMax, c.RetryBackoff))
	}
	pos("SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	if c.NoWorkerGrace < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_NO_WORKER_GRACE: must not be negative (0 = off), got %s", c.NoWorkerGrace))
	}
	if c.MaxRuntime < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_MAX_RUNTIME: must not be negative, got %s", c.MaxRuntime))
	}
	switch c.Spawn {
	case spawn.ModePublish, spawn.ModeDev:
	case spawn.ModeCommand:
		if len(c.SpawnCommand) == 0 {
			errs = append(errs, errors.New("SLUICE_SPAWN_COMMAND: required with SLUICE_SPAWN=command"))
		}
	default:
		errs = append(errs, fmt.Errorf("SLUICE_SPAWN: %q is not command, dev or empty", c.Spawn))
	}
	if c.SpawnMax < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_SPAWN_MAX: must not be negative (0 = off), got %d", c.SpawnMax))
	}
	if c.SpawnCooldown < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_SPAWN_COOLDOWN: must not be negative, got %s", c.SpawnCooldown))
	}
	pos("SLUICE_SPAWN_TIMEOUT", c.SpawnTimeout)
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		errs = append(errs, fmt.Errorf("SLUICE_SCHEDULER_CONCURRENCY: must be between 1 and 4096, got %d", c.Concurrency))
	}
	if c.ClaimTTL > 0 && c.OfferTimeout > 0 && c.ClaimTTL < 2*c.OfferTimeout {
		errs = append(errs, fmt.Errorf("SLUICE_CLAIM_TTL: %s must be at least twice SLUICE_OFFER_TIMEOUT (%s)", c.ClaimTTL, c.OfferTimeout))
	}
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
