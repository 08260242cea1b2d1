package reaper

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
)

// Config is everything the reaper reads from the environment.
type Config struct {
	// Bus, Store and Log are the settings every service shares.
	Bus   bus.Env
	Store dial.Env
	Log   observe.Env

	// StaleThreshold is the heartbeat age that makes a running job stale.
	StaleThreshold time.Duration `env:"SLUICE_STALE_THRESHOLD" envDefault:"30s"`
	// Interval is the time between sweeps; 0 = a third of the stale threshold.
	Interval time.Duration `env:"SLUICE_REAPER_INTERVAL" envDefault:"0s"`
	// MaxRuntime fails jobs running longer; 0 = no limit.
	MaxRuntime time.Duration `env:"SLUICE_MAX_RUNTIME" envDefault:"0s"`
	// Retention keeps finished jobs this long before purging; 0 = forever.
	Retention time.Duration `env:"SLUICE_RETENTION" envDefault:"168h"`
	// Batch bounds one query or one purge.
	Batch int `env:"SLUICE_REAPER_BATCH" envDefault:"500"`
	// HTTPAddr serves /healthz, /readyz and /metrics; empty = none.
	HTTPAddr string `env:"SLUICE_REAPER_HTTP_ADDR"`
	// ShutdownTimeout bounds the drain on shutdown: a sweep in progress
	// when it begins may finish within it.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s"`
}

// DefaultConfig is the configuration with every variable unset.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the reaper's binary needs before it builds the reaper:
// NATS, the logger and the store.
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
	c = c.withDefaults()
	return c, c.Validate()
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = min(max(c.StaleThreshold/3, 100*time.Millisecond), 30*time.Second)
	}
	return c
}

// Validate checks the settings and names the variable at fault.
func (c Config) Validate() error {
	var errs []error
	if c.StaleThreshold <= 0 {
		errs = append(errs, fmt.Errorf("SLUICE_STALE_THRESHOLD: must be positive, got %s", c.StaleThreshold))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_REAPER_INTERVAL: must not be negative, got %s", c.Interval))
	}
	if c.MaxRuntime < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_MAX_RUNTIME: must not be negative, got %s", c.MaxRuntime))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("SLUICE_RETENTION: must not be negative, got %s", c.Retention))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("SLUICE_SHUTDOWN_TIMEOUT: must be positive, got %s", c.ShutdownTimeout))
	}
	if c.Batch < 1 || c.Batch > 100000 {
		errs = append(errs, fmt.Errorf("SLUICE_REAPER_BATCH: must be between 1 and 100000, got %d", c.Batch))
	}
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
