package store

import (
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
	if ch.Usage != nil {
		u := *ch.Usage
		j.Usage = &u
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
