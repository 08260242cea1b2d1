package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The fan-out rules. A parent holds a window of released children: the
// first min(window, items) are released at admission, the others held (out
// of the ready queue and of every sweep). Each rule here is a decision over
// what a driver read of a parent (FanoutParent) that returns the change set
// the driver applies: the embedded driver in the transaction that read the
// parent, the MongoDB driver as a sequence of single-document updates
// ordered so that a process dying between two of them leaves the window
// narrower, never wider (see its fanout.go). Neither driver decides
// anything of its own.

// FanoutParent is what a fan-out rule reads of a parent.
type FanoutParent struct {
	ID    string
	State contracts.JobState
	// Window is the parent's concurrency: how many of its released
	// children may be open (not ended) at once.
	Window int
	// Released is the parent's cursor: the children below this index were
	// released (or ended while held), those at or past it are held.
	Released int
	// Counts are the children in all (Total) and those that ended.
	Counts          contracts.ChildCounts
	FailFast        bool
	CancelRequested bool
}

// FanoutStep is the change set of a fan-out rule on one parent, applied in
// this order: Count, CancelWaiting (with its cancel requests), ReleaseNext;
// then the driver asks FinishParent about the parent as it is afterwards.
type FanoutStep struct {
	// Count is the parent's count of ended children that grows by one: the
	// final state a child ended in; "" counts nothing.
	Count contracts.JobState
	// RequestCancel marks the parent itself cancel_requested (a user's
	// cancel): it then ends cancelled.
	RequestCancel bool
	// CancelWaiting, when set, ends every waiting child (held, ready or
	// claimed) with this change (CancelWaitingChange), counts them
	// cancelled on the parent, moves its cursor to the end (nothing is
	// released any more) and asks its running children to stop
	// (RequestCancelChange).
	CancelWaiting *Change
	// ReleaseNext releases the parent's next held child that is still
	// waiting (one cancelled while held is stepped over): it takes the
	// ended child's place in the window.
	ReleaseNext bool
}

// ReleasedAtAdmission is how many children of a parent with that window
// over that many items are released as it is admitted: the first
// min(window, items); the others are held until a released child ends.
func ReleasedAtAdmission(window, items int) int { return min(window, items) }

// EndChild is what a child's end in the final state st does to its parent
// p, read in the same step: the child is counted; under fail_fast a failed
// child cancels the children still waiting; otherwise, unless the parent
// is cancelling, a child that held a place in the window (it was released:
// held is false) hands it to the next held child. A parent that ended (or
// is gone: found false) is left alone.
func EndChild(p FanoutParent, found bool, childID string, held bool, st contracts.JobState, now time.Time) FanoutStep {
	if !found || p.State.Final() || !st.Final() {
		return FanoutStep{}
	}
	step := FanoutStep{Count: st}
	switch {
	case st == contracts.StateFailed && p.FailFast && !p.CancelRequested:
		ch := CancelWaitingChange(now, contracts.JobError(contracts.ClassCancelled,
			fmt.Sprintf("fail_fast: child %s failed", childID)))
		step.CancelWaiting = &ch
	case !held && !p.CancelRequested:
		step.ReleaseNext = true
	}
	return step
}

// Apply returns p as it is after step, given the children CancelWaiting
// ended (cancelled) and whether ReleaseNext released one: the parent a
// driver that applied step passes to FinishParent.
func (step FanoutStep) Apply(p FanoutParent, cancelled int) FanoutParent {
	if step.Count != "" {
		p.Counts.Add(step.Count)
	}
	if step.RequestCancel {
		p.CancelRequested = true
	}
	if step.CancelWaiting != nil {
		p.Counts.Cancelled += cancelled
		p.Released = p.Counts.Total
	}
	return p
}

// Gaps is how many places in p's window are empty when open of its
// released children have not ended: what releases of held children must
// fill (none while it is cancelling or once every child was released). A
// driver that lost a release (MongoDB, a process that died between two
// steps) fills them.
func (p FanoutParent) Gaps(open int) int {
	if p.CancelRequested || p.Released >= p.Counts.Total {
		return 0
	}
	return max(p.Window-open, 0)
}

// StartParentChange is the change of a pending parent when its first child
// starts: running from then on (it is never dispatched itself).
func StartParentChange(now time.Time) Change {
	at := now
	return Change{Now: now, State: contracts.StateRunning, StartedAt: &at}
}

// ParentEnd is how a parent whose children all ended ends.
type ParentEnd struct {
	State contracts.JobState
	// Error is "" for a parent that succeeded.
	Error string
	// Counts are the children's final counts (no pending or running).
	Counts contracts.ChildCounts
	// Result is the parent's result: a contracts.FanoutResult.
	Result json.RawMessage
}

// FinishParent says whether p ends now (every child ended and p has not
// ended yet) and how: cancelled when a user cancelled it, failed when a
// child failed or was cancelled, succeeded otherwise, its result naming
// the counts and failed, the first failed children (at most
// contracts.MaxFailedChildren, by index). Its admission slots and items go
// with its end (ParentSlots, contracts.JobItems).
func FinishParent(p FanoutParent, failed []string) (ParentEnd, bool) {
	if !p.Counts.Done() || p.State.Final() {
		return ParentEnd{}, false
	}
	counts := p.Counts
	counts.Pending, counts.Running = 0, 0
	if len(failed) > contracts.MaxFailedChildren {
		failed = failed[:contracts.MaxFailedChildren]
	}
	doc, err := json.Marshal(contracts.FanoutResult{Children: counts, Failed: failed})
	if err != nil {
		// A struct of ints and strings always encodes.
		panic(fmt.Sprintf("encode a fan-out result: %v", err))
	}
	return ParentEnd{
		State:  contracts.ParentFinalState(counts, p.CancelRequested),
		Error:  contracts.ParentError(counts, p.CancelRequested),
		Counts: counts,
		Result: doc,
	}, true
}

// Change is e as the change of the parent at now (final: its claim, next
// dispatch time and dedup key go; a driver also clears its progress).
func (e ParentEnd) Change(now time.Time) Change {
	ch := Change{Now: now, State: e.State, Result: e.Result}
	if e.Error != "" {
		ch.Error = &e.Error
	}
	return ch
}

// FanoutWait is how long a released child may wait for a worker: its
// parent's own dispatch deadline counted from the parent's run_at or
// creation, whichever is later (0 when the parent has no deadline). A child
// released at t must be dispatched by t + FanoutWait.
func FanoutWait(deadline, createdAt time.Time, runAt *time.Time) time.Duration {
	if deadline.IsZero() {
		return 0
	}
	from := createdAt
	if runAt != nil && runAt.After(from) {
		from = *runAt
	}
	return deadline.Sub(from)
}

// ChildCountsWith is c completed with the running children of a parent
// that has not ended (a stored parent counts only the ended ones): running
// as counted, pending the rest.
func ChildCountsWith(c contracts.ChildCounts, running int) contracts.ChildCounts {
	c.Running = running
	c.Pending = max(c.Total-c.Finished()-running, 0)
	return c
}
