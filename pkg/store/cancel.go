package store

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The cancel cascade. A user's cancel ends a pending job cancelled at once
// and asks a running one to stop (cancel_requested: its worker is told, and
// its run's end ends it cancelled, see ResultChange and DecideRequeue). A
// fan-out parent's cancel reaches its children: the waiting ones end
// cancelled, the running ones are asked to stop, and the parent ends
// cancelled with its last child (CancelFanout).

// CancelAction is what a user's cancel does to a job.
type CancelAction int

const (
	// CancelNothing: the job is already cancelled; it is returned as is.
	CancelNothing CancelAction = iota
	// CancelRefused: the job ended otherwise (succeeded or failed); it
	// cannot be cancelled.
	CancelRefused
	// CancelCascade: an active fan-out parent, cancelled with its
	// children (Store.CancelParent, CancelFanout).
	CancelCascade
	// CancelWrite: Change is applied as a compare-and-set on the job as
	// read: a pending job ends cancelled, a running one is asked to stop.
	CancelWrite
	// CancelTell: a running job already asked to stop; nothing is
	// written, its worker is told again.
	CancelTell
)

// Cancel is the change set of a user's cancel of one job.
type Cancel struct {
	Action CancelAction
	Change Change
	// TellWorker: the job runs; once Change (if any) is applied, its worker
	// is told to stop it.
	TellWorker bool
}

// DecideCancel is what a user's cancel at now does to job, read as the
// store holds it (see CancelAction). A job in a state the machine does not
// know is CancelRefused.
func DecideCancel(job contracts.Job, now time.Time) Cancel {
	if job.IsParent() && job.State.Active() {
		return Cancel{Action: CancelCascade}
	}
	switch job.State {
	case contracts.StateCancelled:
		return Cancel{Action: CancelNothing}
	case contracts.StatePending:
		return Cancel{Action: CancelWrite, Change: CancelWaitingChange(now, contracts.CancelledByRequest)}
	case contracts.StateRunning:
		if job.CancelRequested {
			return Cancel{Action: CancelTell, TellWorker: true}
		}
		return Cancel{Action: CancelWrite, Change: RequestCancelChange(now), TellWorker: true}
	}
	return Cancel{Action: CancelRefused}
}

// CancelFanout is a user's cancel of parent p: the parent is marked
// cancel_requested, its waiting children end cancelled with reason, its
// running children are asked to stop, and it ends cancelled once its last
// child ends (at once when none runs). A parent that already ended is
// returned as it is: ok is false and nothing changes.
func CancelFanout(p FanoutParent, reason string, now time.Time) (step FanoutStep, ok bool) {
	if p.State.Final() {
		return FanoutStep{}, false
	}
	ch := CancelWaitingChange(now, reason)
	return FanoutStep{RequestCancel: true, CancelWaiting: &ch}, true
}

// CancelWaitingChange is the change of a parent's waiting child that a
// cancel cascade ends: cancelled with reason (final: its claim, next
// dispatch time and dedup key go).
func CancelWaitingChange(now time.Time, reason string) Change {
	return Change{Now: now, State: contracts.StateCancelled, Error: &reason}
}

// RequestCancelChange is the change of a running job a cancel reaches: it
// keeps running, cancel_requested, until its worker stops it.
func RequestCancelChange(now time.Time) Change {
	yes := true
	return Change{Now: now, State: contracts.StateRunning, CancelRequested: &yes}
}
