// Package lease tracks the attempts a worker holds: one entry per job,
// naming its attempt, how to cancel its handler and when the scheduler last
// acknowledged it. It decides nothing about NATS; the worker feeds it
// heartbeat acks and cancel requests, and it fences handlers whose lease
// was lost or went unacknowledged for too long.
package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Causes a handler's context is cancelled with.
var (
	// ErrLost means the scheduler reported the lease lost: another attempt
	// owns the job now, so this one must stop and report nothing.
	ErrLost = errors.New("lease lost")
	// ErrUnacknowledged means no heartbeat for the lease was acknowledged for
	// too long: the worker fences itself and reports nothing.
	ErrUnacknowledged = errors.New("lease not acknowledged in time")
	// ErrCancelRequested means a user asked to cancel the job.
	ErrCancelRequested = errors.New("cancelled by request")
)

// Status is what the table knows about a lease an offer asks for.
type Status int

// Lease statuses.
const (
	// Free means no attempt of the job is held.
	Free Status = iota
	// Held means this very attempt is held (a duplicate offer).
	Held
	// Conflict means another attempt of the same job is held.
	Conflict
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Free:
		return "free"
	case Held:
		return "held"
	case Conflict:
		return "conflict"
	}
	return "unknown"
}

type entry struct {
	attempt         int64
	cancel          context.CancelCauseFunc
	lastAck         time.Time
	ack             atomic.Int64 // lastAck as nanoseconds since the table's base, read without mu
	done            bool         // the handler returned; no more heartbeats
	fenced          bool         // lost or unacknowledged: report nothing
	cancelRequested bool
}

// Table is the set of leases a worker holds. It is safe for concurrent use.
type Table struct {
	mu sync.Mutex
	m  map[string]*entry
	// base is the origin of the entries' ack readings.
	base time.Time
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{m: map[string]*entry{}, base: time.Now()} }

// Lookup says whether the lease, or another attempt of its job, is held.
func (t *Table) Lookup(l contracts.Lease) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lookupLocked(l)
}

func (t *Table) lookupLocked(l contracts.Lease) Status {
	e, ok := t.m[l.JobID]
	switch {
	case !ok:
		return Free
	case e.attempt == l.Claim:
		return Held
	default:
		return Conflict
	}
}

// Add records a newly accepted lease whose handler stops through cancel.
// now counts as its last acknowledgement, so self-fencing starts from the
// acceptance. It reports false, adding nothing, unless the job was Free.
func (t *Table) Add(l contracts.Lease, cancel context.CancelCauseFunc, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lookupLocked(l) != Free {
		return false
	}
	e := &entry{attempt: l.Claim, cancel: cancel, lastAck: now}
	e.ack.Store(int64(now.Sub(t.base)))
	t.m[l.JobID] = e
	return true
}

func (t *Table) get(l contracts.Lease) *entry {
	e, ok := t.m[l.JobID]
	if !ok || e.attempt != l.Claim {
		return nil
	}
	return e
}

// Finish marks the lease's handler as returned: it is no longer renewed,
// fenced or cancelled, but stays held (so a duplicate offer is still
// recognised) until Remove.
func (t *Table) Finish(l contracts.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.get(l); e != nil {
		e.done = true
	}
}

// Remove forgets the lease.
func (t *Table) Remove(l contracts.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get(l) != nil {
		delete(t.m, l.JobID)
	}
}

// Active returns the leases whose handlers still run (or wait to start),
// sorted by job id: the leases a heartbeat renews.
func (t *Table) Active() []contracts.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]contracts.Lease, 0, len(t.m))
	for id, e := range t.m {
		if !e.done && !e.fenced {
			out = append(out, contracts.Lease{JobID: id, Claim: e.attempt})
		}
	}
	slices.SortFunc(out, func(a, b contracts.Lease) int { return strings.Compare(a.JobID, b.JobID) })
	return out
}

// Acked records that a heartbeat for leases, sent at time at, was
// acknowledged. Leases the table does not hold are ignored.
func (t *Table) Acked(leases []contracts.Lease, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range leases {
		if e := t.get(l); e != nil && at.After(e.lastAck) {
			e.lastAck = at
			e.ack.Store(int64(at.Sub(t.base)))
		}
	}
}

// Fence stops the lease's handler with cause (ErrLost or
// ErrUnacknowledged) and marks the attempt as one whose outcome must not be
// reported. It reports whether a running lease was fenced.
func (t *Table) Fence(l contracts.Lease, cause error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(l)
	if e == nil || e.done || e.fenced {
		return false
	}
	e.fenced = true
	e.cancel(cause)
	return true
}

// FenceIfUnacknowledged fences the lease as Fence does with
// ErrUnacknowledged, but only when its last acknowledgement is older than
// maxAge at time now. It reports whether it fenced a running lease.
func (t *Table) FenceIfUnacknowledged(l contracts.Lease, now time.Time, maxAge time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(l)
	if e == nil || e.done || e.fenced || now.Sub(e.lastAck) <= maxAge {
		return false
	}
	e.fenced = true
	e.cancel(ErrUnacknowledged)
	return true
}

// Cancel stops the lease's handler because a user asked to cancel the job.
// It reports whether a running lease was cancelled.
func (t *Table) Cancel(l contracts.Lease) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(l)
	if e == nil || e.done {
		return false
	}
	e.cancelRequested = true
	e.cancel(ErrCancelRequested)
	return true
}

// Unacknowledged returns the running leases whose last acknowledgement is
// older than maxAge at time now: the ones the worker must fence itself.
func (t *Table) Unacknowledged(now time.Time, maxAge time.Duration) []contracts.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []contracts.Lease
	for id, e := range t.m {
		if !e.done && !e.fenced && now.Sub(e.lastAck) > maxAge {
			out = append(out, contracts.Lease{JobID: id, Claim: e.attempt})
		}
	}
	slices.SortFunc(out, func(a, b contracts.Lease) int { return strings.Compare(a.JobID, b.JobID) })
	return out
}

// Left is how long the lease lasts from now by the self-fencing rule (its
// last acknowledgement plus maxAge), 0 once it was fenced; false when the
// table does not hold it or its handler returned.
func (t *Table) Left(l contracts.Lease, now time.Time, maxAge time.Duration) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(l)
	switch {
	case e == nil || e.done:
		return 0, false
	case e.fenced:
		return 0, true
	}
	return e.lastAck.Add(maxAge).Sub(now), true
}

// Flags reports whether the lease was fenced and whether its cancel was
// requested. A lease the table does not hold reports false, false.
func (t *Table) Flags(l contracts.Lease) (fenced, cancelRequested bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.get(l); e != nil {
		return e.fenced, e.cancelRequested
	}
	return false, false
}

// Len returns the number of held leases, finished or not.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Context returns the context of the lease's handler: parent, whose Err
// also reads the clock (now) against the lease's self-fencing deadline
// (its last acknowledgement plus maxAge) and, past it, calls expired
// (which fences the lease, cancelling parent) before it answers. A
// handler that checks its context before it acts so never acts after its
// lease passed, even when its worker resumes from a freeze and the
// handler runs before the goroutine that would fence it. Done is
// parent's: a handler blocked on it wakes when the lease is fenced.
func (t *Table) Context(parent context.Context, l contracts.Lease, now func() time.Time, maxAge time.Duration, expired func()) context.Context {
	t.mu.Lock()
	e := t.get(l)
	t.mu.Unlock()
	if e == nil {
		return parent
	}
	return &leaseContext{Context: parent, e: e, base: t.base, now: now, maxAge: maxAge, expired: expired}
}

// leaseContext is a handler's context that ends when its lease passes.
type leaseContext struct {
	context.Context
	e       *entry
	base    time.Time
	now     func() time.Time
	maxAge  time.Duration
	expired func()
}

// Err is the parent's error, or the cause of the fence when the lease
// passed since it was last acknowledged.
func (c *leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.now().Sub(c.base)-time.Duration(c.e.ack.Load()) <= c.maxAge {
		return nil
	}
	c.expired()
	return c.Context.Err()
}
