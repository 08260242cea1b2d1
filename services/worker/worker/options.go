package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options.
const (
	// DefaultClaimWait bounds how long an accepted job waits for its start
	// heartbeat to be acknowledged before the worker gives it up.
	DefaultClaimWait = 10 * time.Second
	// DefaultDeliveryGrace is how long pending results may still be
	// delivered after the shutdown timeout.
	DefaultDeliveryGrace = 10 * time.Second
	// DefaultExecGrace is the time between SIGTERM and SIGKILL for exec jobs.
	DefaultExecGrace = 5 * time.Second
)

// Option changes how New builds a Worker.
type Option func(*options)

type options struct {
	now           func() time.Time
	reg           prometheus.Registerer
	builtins      bool
	claimWait     time.Duration
	deliveryGrace time.Duration
	execGrace     time.Duration
}

func defaultOptions() options {
	return options{
		now:           time.Now,
		builtins:      true,
		claimWait:     DefaultClaimWait,
		deliveryGrace: DefaultDeliveryGrace,
		execGrace:     DefaultExecGrace,
	}
}

// WithClock makes the worker read the time from now (for lease ages and
// idle time). Timers still use the real clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithRegisterer registers the worker's metrics on reg instead of a
// private registry. Several workers may share one registerer.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithBuiltins says whether the built-in kinds listed in Config.Kinds are
// registered (the default) or not.
func WithBuiltins(on bool) Option {
	return func(o *options) { o.builtins = on }
}

// WithClaimWait bounds the wait for the start heartbeat's acknowledgement
// (DefaultClaimWait by default); a job not acknowledged in time never runs.
func WithClaimWait(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.claimWait = d
		}
	}
}

// WithDeliveryGrace bounds how long results may still be delivered after
// the shutdown timeout passed (DefaultDeliveryGrace by default).
func WithDeliveryGrace(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.deliveryGrace = d
		}
	}
}

// WithExecGrace sets the exec kind's time between SIGTERM and SIGKILL
// (DefaultExecGrace by default).
func WithExecGrace(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.execGrace = d
		}
	}
}
