// Package apply records what workers and the reaper report: results,
// heartbeats and progress from workers, requeue events from the reaper.
// Every write is a compare-and-set on the job's claim, so a late report
// from an old claim changes nothing. Progress is kept in memory and
// written at most once per flush period per job, and with the job's end.
package apply

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Jobs is the part of the store the applier uses.
type Jobs interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
	Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error)
	UpdateEach(ctx context.Context, ids []string, decide store.DecideEach) ([]store.Updated, error)
	Heartbeat(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time, renewAfter time.Duration) (store.HeartbeatOutcome, error)
}

// Notifier sends the messages applying a report can cause.
type Notifier interface {
	// Due publishes a due message for the job.
	Due(ctx context.Context, jobID string) error
	// Cancel asks a worker to stop an attempt.
	Cancel(workerID string, l contracts.Lease) error
}

// Config holds the thresholds requeues are checked against.
type Config struct {
	StaleThreshold time.Duration
	// LeaseRenewAfter is the age of a stored heartbeat at which a worker's
	// heartbeat writes its lease again; a younger one is kept without a
	// write (see store.DecideLease). 0 = every heartbeat writes.
	LeaseRenewAfter time.Duration
	// MaxRuntime is the hard limit on one run; 0 = none.
	MaxRuntime time.Duration
	// RetryBackoff and RetryBackoffMax bound the wait before a failed job
	// runs again (see RetryDelay).
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// ProgressFlush is how often the newest progress report of each
	// running job is written (see Run); 0 = every report as it comes.
	ProgressFlush time.Duration
	// ShutdownTimeout bounds the last flush when Run's context ends.
	ShutdownTimeout time.Duration
}

// Applier applies results, heartbeats, progress reports and requeue
// events. Run owns its progress flushes.
type Applier struct {
	cfg    Config
	jobs   Jobs
	notify Notifier
	now    func() time.Time
	log    zerolog.Logger
	m      *metrics.Scheduler
	ev     *events.Publisher
	book   *progressBook
}

// New returns an applier that publishes change events to ev (nil = none).
func New(cfg Config, jobs Jobs, n Notifier, ev *events.Publisher, now func() time.Time, log zerolog.Logger, m *metrics.Scheduler) *Applier {
	return &Applier{cfg: cfg, jobs: jobs, notify: n, now: now, log: log, m: m, ev: ev, book: newProgressBook()}
}

// storeRetry is how soon a message comes back when the store did not answer.
const storeRetry = time.Second
