// Package sweep is one pass of the reaper: find running jobs whose worker
// went quiet or that ran too long and publish a requeue event for each;
// purge finished jobs past retention; repair admission counters. Every
// pass is idempotent, so any number of reapers may run.
//
// Pending jobs are not the reaper's: the store is the ready queue, and the
// schedulers find every pending job there however long it waits (its
// claim, if any, expires; a lost wake-up only delays it to their next
// poll; its dispatch deadline is the schedulers' sweep).
package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Jobs is the part of the store a sweep uses.
type Jobs interface {
	Stale(ctx context.Context, q store.StaleQuery) ([]contracts.Job, error)
	Purge(ctx context.Context, finishedBefore time.Time, limit int) (int, error)
	Reconcile(ctx context.Context) (int, error)
}

// Publisher sends one requeue event durably.
type Publisher interface {
	Requeue(ctx context.Context, rq contracts.Requeue) error
}

// Config holds the thresholds of a sweep.
type Config struct {
	// StaleThreshold is the heartbeat age that makes a running job stale.
	StaleThreshold time.Duration
	// MaxRuntime is the hard limit of one run; 0 = none.
	MaxRuntime time.Duration
	// Retention keeps finished jobs this long; 0 = forever.
	Retention time.Duration
	// Batch bounds how many jobs one query returns or one purge deletes.
	Batch int
	// MaxPurgeBatches bounds the purge work of one sweep.
	MaxPurgeBatches int
}

// Report says what one sweep did.
type Report struct {
	Found    map[contracts.RequeueReason]int // jobs found to requeue, by reason
	Requeued map[contracts.RequeueReason]int // requeue events published, by reason
	Purged   int
	Drift    int
}

// Sweeper runs sweeps.
type Sweeper struct {
	cfg  Config
	jobs Jobs
	pub  Publisher
	now  func() time.Time
}

// New returns a sweeper.
func New(cfg Config, jobs Jobs, pub Publisher, now func() time.Time) *Sweeper {
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.MaxPurgeBatches <= 0 {
		cfg.MaxPurgeBatches = 20
	}
	return &Sweeper{cfg: cfg, jobs: jobs, pub: pub, now: now}
}

// Reason says why the reaper requeues a job it found, or "" if it should
// not: the stale-requeue rule (store.StaleRule) with the reaper's
// thresholds, the same the scheduler checks the event against.
func Reason(j contracts.Job, now time.Time, cfg Config) contracts.RequeueReason {
	return store.StaleRule{Threshold: cfg.StaleThreshold, MaxRuntime: cfg.MaxRuntime}.Reason(j, now)
}

// Run does one sweep. It goes on past a failing step and returns every
// error it met.
func (s *Sweeper) Run(ctx context.Context) (Report, error) {
	rep := Report{Found: map[contracts.RequeueReason]int{}, Requeued: map[contracts.RequeueReason]int{}}
	now := s.now()
	q := store.StaleQuery{
		Now:             now,
		HeartbeatBefore: now.Add(-s.cfg.StaleThreshold),
		Limit:           s.cfg.Batch,
	}
	if s.cfg.MaxRuntime > 0 {
		q.StartedBefore = now.Add(-s.cfg.MaxRuntime)
	}
	var errs []error
	jobs, err := s.jobs.Stale(ctx, q)
	if err != nil {
		errs = append(errs, fmt.Errorf("find stale jobs: %w", err))
	}
	busDown := false
	for _, j := range jobs {
		reason := Reason(j, now, s.cfg)
		if reason == "" {
			continue
		}
		rep.Found[reason]++
		if busDown {
			continue // counted as found; the next sweep publishes it
		}
		rq := contracts.Requeue{JobID: j.ID, Claim: j.Claim, State: j.State, Reason: reason}
		if err := s.pub.Requeue(ctx, rq); err != nil {
			errs = append(errs, fmt.Errorf("publish requeue for job %s: %w", j.ID, err))
			busDown = true // the bus is down; the next sweep tries again
			continue
		}
		rep.Requeued[reason]++
	}
	if s.cfg.Retention > 0 {
		for range s.cfg.MaxPurgeBatches {
			n, err := s.jobs.Purge(ctx, now.Add(-s.cfg.Retention), s.cfg.Batch)
			if err != nil {
				errs = append(errs, fmt.Errorf("purge: %w", err))
				break
			}
			rep.Purged += n
			if n < s.cfg.Batch {
				break
			}
		}
	}
	drift, err := s.jobs.Reconcile(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("reconcile counters: %w", err))
	}
	rep.Drift = drift
	return rep, errors.Join(errs...)
}
