package store

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Check reports whether ch may be applied to a job at exp at all: the state
// machine must allow the move and a new claim must be larger than the old
// one. Its errors wrap ErrBadTransition. Every driver calls it before it
// touches the database.
func (ch Change) Check(exp Expect) error {
	if !contracts.CanTransition(exp.State, ch.State) {
		return fmt.Errorf("%q to %q: %w", exp.State, ch.State, ErrBadTransition)
	}
	if ch.Claim != 0 && ch.Claim <= exp.Claim {
		return fmt.Errorf("claim %d does not follow %d: %w", ch.Claim, exp.Claim, ErrBadTransition)
	}
	if ch.Unstart && (exp.State != contracts.StateRunning || ch.State != contracts.StatePending || ch.IncAttempt ||
		ch.Worker != nil || ch.StartedAt != nil || ch.HeartbeatAt != nil) {
		return fmt.Errorf("unstart is only a running job going back to pending, with nothing else of its run set: %w", ErrBadTransition)
	}
	return nil
}

// CheckNewJob refuses a job Admit cannot insert as it is: one without an
// id, or not pending at claim 0 (ErrBadTransition). Every driver's Admit
// calls it first.
func CheckNewJob(job contracts.Job) error {
	switch {
	case job.ID == "":
		return errors.New("job has no id")
	case job.State != contracts.StatePending:
		return fmt.Errorf("new job is %q, want %q: %w", job.State, contracts.StatePending, ErrBadTransition)
	case job.Claim != 0:
		return fmt.Errorf("new job is at claim %d, want 0: %w", job.Claim, ErrBadTransition)
	}
	return nil
}

// CheckFanout checks a new job against the items it is admitted with and
// fills what a parent shows: with items, the job is a fan-out parent (its
// Concurrency, the window, must be at least 1) and gets its children's
// counts; without, it must not ask for a window. Every driver's Admit
// calls it after CheckNewJob.
func CheckFanout(job *contracts.Job, items []json.RawMessage) error {
	switch {
	case len(items) == 0 && job.Concurrency != 0:
		return errors.New("a fan-out parent needs items")
	case len(items) == 0:
		job.Children = nil
		return nil
	case job.Concurrency < 1:
		return errors.New("a fan-out parent needs a window (concurrency) of at least 1")
	case job.Parent != "":
		return errors.New("a fan-out child cannot be a parent")
	case len(items) > contracts.MaxItems:
		return fmt.Errorf("%d items, at most %d", len(items), contracts.MaxItems)
	}
	job.Children = &contracts.ChildCounts{Total: len(items), Pending: len(items)}
	job.Progress = job.Children.Progress()
	return nil
}
