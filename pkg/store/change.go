package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Decide looks at a job as the store holds it and returns the change to
// make. An error changes nothing and is returned to Update's caller as it
// is (wrapped), so a caller can tell its own sentinels apart.
type Decide func(job contracts.Job) (Change, error)

// DecideEach is Decide for the job of the i-th id of an UpdateEach.
type DecideEach func(i int, job contracts.Job) (Change, error)

// Updated is the outcome of one job of an UpdateEach: the job afterwards,
// or what kept it from changing.
type Updated struct {
	Job contracts.Job
	Err error
}

// UpdateEachByUpdate is UpdateEach for a driver that updates one job at a
// time: each id in turn, through update.
func UpdateEachByUpdate(ctx context.Context, ids []string, decide DecideEach,
	update func(ctx context.Context, id string, decide Decide) (contracts.Job, error)) []Updated {
	out := make([]Updated, len(ids))
	for i, id := range ids {
		out[i].Job, out[i].Err = update(ctx, id, func(job contracts.Job) (Change, error) { return decide(i, job) })
	}
	return out
}

// Apply returns j with ch applied as a driver applies it (see Change): the
// in-memory twin of a Transition, so a driver that read the job in the
// same transaction need not read it back.
func (ch Change) Apply(j contracts.Job) contracts.Job {
	final := ch.State.Final()
	j.State = ch.State
	j.UpdatedAt = ch.Now.UTC()
	if ch.Claim != 0 {
		j.Claim = ch.Claim
	}
	if ch.IncAttempt {
		j.Attempt++
	}
	if ch.Worker != nil {
		j.Worker = *ch.Worker
	}
	if ch.Unstart {
		j.Attempt--
		j.Worker, j.StartedAt, j.HeartbeatAt = "", nil, nil
	}
	switch {
	case final || ch.ClearClaim:
		j.ClaimUntil = nil
	case ch.ClaimUntil != nil:
		j.ClaimUntil = utcOrNil(ch.ClaimUntil)
	}
	switch {
	case final:
		j.NextDispatchAt = nil
		at := ch.Now.UTC()
		j.FinishedAt = &at
	case ch.NextDispatchAt != nil:
		j.NextDispatchAt = utcOrNil(ch.NextDispatchAt)
	}
	if ch.StartedAt != nil {
		j.StartedAt = utcOrNil(ch.StartedAt)
	}
	if ch.HeartbeatAt != nil {
		j.HeartbeatAt = utcOrNil(ch.HeartbeatAt)
	}
	if ch.Error != nil {
		j.Error = *ch.Error
	}
	if len(ch.Result) > 0 {
		j.Result = ch.Result
	}
	if ch.Progress != nil {
		p := *ch.Progress
		j.Progress = &p
	}
	if ch.CancelRequested != nil {
		j.CancelRequested = *ch.CancelRequested
	}
	if ch.Errors != nil {
		j.Errors = ch.Errors
	}
	return j
}

// utcOrNil is t in UTC, or nil for the zero time (which drivers store as
// no value).
func utcOrNil(t *time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// maxUpdatePasses bounds the compare-and-set misses UpdateByTransition
// retries before it gives up with ErrConflict.
const maxUpdatePasses = 5

// Transitioner is the part of a store UpdateByTransition builds on.
type Transitioner interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
	Transition(ctx context.Context, exp Expect, ch Change) (contracts.Job, error)
}

// UpdateByTransition is Update for a driver without a read-modify-write
// transaction: it reads the job, asks decide, and applies the change as a
// compare-and-set on the state and claim read, reading again and asking
// again after a miss (a few times, then ErrConflict).
func UpdateByTransition(ctx context.Context, s Transitioner, id string, decide Decide) (contracts.Job, error) {
	for range maxUpdatePasses {
		job, err := s.Get(ctx, id)
		if err != nil {
			return contracts.Job{}, err
		}
		ch, err := decide(job)
		if err != nil {
			return contracts.Job{}, fmt.Errorf("update job %s: %w", id, err)
		}
		out, err := s.Transition(ctx, Expect{ID: id, State: job.State, Claim: job.Claim}, ch)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return out, err
	}
	return contracts.Job{}, fmt.Errorf("update job %s: changed under every try: %w", id, ErrConflict)
}
