// Package cancel carries out a user's request to cancel a job.
//
// A pending job is moved to cancelled at once. A running job is marked
// cancel_requested (a running → running compare-and-set) and its worker is
// told on its cancel subject; the worker stops the handler and reports the
// job cancelled. The worker also learns of the request from its next
// heartbeat acknowledgement, so a lost core-NATS message delays the cancel
// but never loses it.
//
// A fan-out parent is cancelled with its children in one store step
// (store.CancelParent): the waiting ones end cancelled at once, the
// running ones are reached as above, and the parent ends cancelled with
// its last running child.
//
// Cancelling is idempotent: a job already cancelled, or whose cancel was
// already requested, is returned as it is (a repeated request for a running
// job re-sends the message to the worker).
package cancel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
)

// maxRounds bounds the re-read and retry loop when the job changes under
// a compare-and-set.
const maxRounds = 8

// Errors of Cancel.
var (
	// ErrNotFound means no job with that id belongs to the tenant.
	ErrNotFound = errors.New("cancel: job not found")
	// ErrBusy means the job kept changing under every compare-and-set.
	ErrBusy = errors.New("cancel: job kept changing, try again")
)

// FinishedError means the job already ended in a state other than
// cancelled, so there is nothing to cancel.
type FinishedError struct {
	State contracts.JobState
}

// Error implements error.
func (e *FinishedError) Error() string {
	return fmt.Sprintf("job already %s, it cannot be cancelled", e.State)
}

// Canceller cancels jobs. It is safe for concurrent use.
type Canceller struct {
	store store.Store
	nc    *nats.Conn
	now   func() time.Time
	log   zerolog.Logger
	ev    *events.Publisher
}

// New returns a Canceller that writes to st, tells workers through nc and
// publishes change events to ev (nil = none).
func New(st store.Store, nc *nats.Conn, ev *events.Publisher, now func() time.Time, log zerolog.Logger) *Canceller {
	if now == nil {
		now = time.Now
	}
	return &Canceller{store: st, nc: nc, now: now, log: log, ev: ev}
}

// Cancel cancels the tenant's job id and returns the job as it is
// afterwards. Another tenant's job is ErrNotFound, exactly like a missing
// one; a job finished otherwise is a *FinishedError.
func (c *Canceller) Cancel(ctx context.Context, tenant, id string) (contracts.Job, error) {
	for range maxRounds {
		job, err := c.store.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return contracts.Job{}, ErrNotFound
		case err != nil:
			return contracts.Job{}, fmt.Errorf("cancel job %s: %w", id, err)
		case job.Tenant != tenant:
			return contracts.Job{}, ErrNotFound
		}
		d := store.DecideCancel(job, c.now().UTC())
		out := job
		switch d.Action {
		case store.CancelCascade:
			return c.cancelParent(ctx, job)
		case store.CancelNothing:
			return job, nil
		case store.CancelRefused:
			if !job.State.Final() {
				return contracts.Job{}, fmt.Errorf("cancel job %s: unknown state %q", id, job.State)
			}
			return job, &FinishedError{State: job.State}
		case store.CancelWrite:
			out, err = c.store.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Claim: job.Claim}, d.Change)
			if isMiss(err) {
				continue
			}
			if err != nil {
				return contracts.Job{}, fmt.Errorf("cancel %s job %s: %w", job.State, id, err)
			}
			c.ev.State(out)
		}
		if d.TellWorker {
			c.tellWorker(out)
		}
		return out, nil
	}
	return contracts.Job{}, fmt.Errorf("cancel job %s: %w", id, ErrBusy)
}

// cancelParent cancels a fan-out parent and tells the workers of its
// running children.
func (c *Canceller) cancelParent(ctx context.Context, job contracts.Job) (contracts.Job, error) {
	out, running, err := c.store.CancelParent(ctx, job.ID, c.now().UTC(), contracts.CancelledByRequest)
	if err != nil {
		return contracts.Job{}, fmt.Errorf("cancel parent %s: %w", job.ID, err)
	}
	c.ev.State(out)
	for _, r := range running {
		c.ev.State(r)
		c.tellWorker(r)
	}
	return out, nil
}

// isMiss reports whether a compare-and-set missed because the job moved on.
func isMiss(err error) bool {
	return errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)
}

// tellWorker publishes a CancelJob to the worker running job. A failure is
// logged only: the worker also learns of the request from its heartbeat
// acknowledgement.
func (c *Canceller) tellWorker(job contracts.Job) {
	if !contracts.ValidWorkerID(job.Worker) {
		return
	}
	subject := contracts.WorkerCancelSubject(job.Worker)
	data, err := json.Marshal(contracts.CancelJob{JobID: job.ID, Claim: job.Claim})
	if err == nil {
		err = c.nc.Publish(subject, data)
	}
	if err != nil {
		c.log.Warn().Err(err).
			Str(observe.FieldJobID, job.ID).
			Str(observe.FieldTenant, job.Tenant).
			Str(observe.FieldWorkerID, job.Worker).
			Str(observe.FieldSubject, subject).
			Msg("cancel message not sent; the worker will learn of it from its heartbeat")
	}
}
