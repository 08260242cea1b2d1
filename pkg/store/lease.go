package store

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// LeaseView is what a heartbeat reads of a lease's job. The zero view is a
// missing job.
type LeaseView struct {
	State contracts.JobState
	// Claim is the job's fencing counter.
	Claim  int64
	Worker string
	// HeartbeatAt is the stored heartbeat, zero when there is none.
	HeartbeatAt time.Time
}

// LeaseAction is what a heartbeat does with one lease.
type LeaseAction int

const (
	// LeaseLost: the lease is no longer the worker's; nothing is written.
	LeaseLost LeaseAction = iota
	// LeasePromote: a pending claim the worker accepted becomes running
	// on it (a write).
	LeasePromote
	// LeaseRenew: a running lease whose stored heartbeat reached the renew
	// point; heartbeat_at is written.
	LeaseRenew
	// LeaseKeep: a running lease whose stored heartbeat is recent enough;
	// the answer comes from the read and nothing is written.
	LeaseKeep
)

// Writes reports whether the action writes the job.
func (a LeaseAction) Writes() bool { return a == LeasePromote || a == LeaseRenew }

// DecideLease says what workerID's heartbeat at now does with lease l of
// the job read as v:
//
//   - running at l's claim on workerID: LeaseKeep while the stored
//     heartbeat is younger than renewAfter, else LeaseRenew (renewAfter
//     ≤ 0 renews at every heartbeat);
//   - pending at l's claim (≥ 1, a dispatch claim the worker accepted):
//     LeasePromote;
//   - anything else — another claim or worker, a final or missing job —
//     LeaseLost.
//
// Since a kept lease's stored heartbeat is at most renewAfter plus one
// heartbeat interval old, the stale threshold must exceed that sum (the
// scheduler's configuration checks it).
func DecideLease(v LeaseView, l contracts.Lease, workerID string, now time.Time, renewAfter time.Duration) LeaseAction {
	if v.Claim != l.Claim {
		return LeaseLost
	}
	switch {
	case v.State == contracts.StateRunning && v.Worker == workerID:
		if renewAfter > 0 && !v.HeartbeatAt.IsZero() && now.Sub(v.HeartbeatAt) < renewAfter {
			return LeaseKeep
		}
		return LeaseRenew
	case v.State == contracts.StatePending && l.Claim > 0:
		return LeasePromote
	default:
		return LeaseLost
	}
}
