package mongo

import "time"

// Defaults of the options.
const (
	// DefaultTimeout bounds every store call.
	DefaultTimeout = 10 * time.Second
	// DefaultDatabase is used when neither the URI nor WithDatabase names one.
	DefaultDatabase = "sluice"
	// DefaultReconcileGrace is how long Reconcile watches a counter that
	// looks too high, unchanged, before it lowers it (see Reconcile).
	DefaultReconcileGrace = time.Minute
)

// Option tunes Open.
type Option func(*config)

type config struct {
	timeout  time.Duration
	database string
	grace    time.Duration
	now      func() time.Time
	batch    int
}

func defaultConfig() config {
	return config{timeout: DefaultTimeout, grace: DefaultReconcileGrace, now: time.Now, batch: fanoutBatch}
}

// WithFanoutBatch sets how many children of a fan-out one insert command
// carries (default 1,000); each batch also renews the admission's staged
// document (see stage.go). Non-positive values are ignored.
func WithFanoutBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.batch = n
		}
	}
}

// WithTimeout bounds each store call (every method of Store, and Open's
// index setup) to d, on top of the caller's context (default 10s).
// Non-positive values are ignored.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithDatabase names the database, overriding the one in the URI's path.
// An empty name is ignored.
func WithDatabase(name string) Option {
	return func(c *config) {
		if name != "" {
			c.database = name
		}
	}
}

// WithReconcileGrace sets how long a counter must look too high, with
// nothing admitted or released under it, before Reconcile lowers it
// (default 1 minute). It must be longer than any admission or release takes
// between its counter step and its job step, or Reconcile can take back a
// slot that is still being used; 0 lowers at once and is only safe when no
// other writer is running (tests, maintenance). Negative values are ignored.
func WithReconcileGrace(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.grace = d
		}
	}
}

// WithClock makes Reconcile read the time from now, which measures its
// grace period (default time.Now). A nil now is ignored.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}
