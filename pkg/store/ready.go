package store

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The ready queue. The store is also the queue dispatch takes jobs from:
// a pending job is ready when its time has come (next_dispatch_at, which
// carries run_at and a retry's backoff), it holds no live dispatch claim,
// and its concurrency key, if any, is under its limit. Ready jobs are taken
// best first:
//
//  1. priority, higher first;
//  2. fair_at, lower first: the job's virtual start time in its tenant's
//     fair queue, stamped at admission by FairAt;
//  3. id (time-ordered), lower first.

// ClaimRequest asks Claim for the best ready jobs.
type ClaimRequest struct {
	// Now decides which jobs are ready and which claims are live; zero is
	// the current time.
	Now time.Time
	// Until is when the new claims end.
	Until time.Time
	// Kinds says how many jobs of each kind to claim at most.
	Kinds map[string]int
}

// Plan is what a driver's Claim works through: the time that decides
// readiness (Now, or the current time), and the kinds asked for, in name
// order, each with how many to take (at most MaxClaim).
func (r ClaimRequest) Plan() (now time.Time, kinds []string, want map[string]int) {
	now = r.Now
	if now.IsZero() {
		now = time.Now()
	}
	want = map[string]int{}
	for k, n := range r.Kinds {
		if n > 0 {
			kinds = append(kinds, k)
			want[k] = min(n, MaxClaim)
		}
	}
	sort.Strings(kinds)
	return now, kinds, want
}

// MaxClaim bounds the jobs one Claim takes of one kind.
const MaxClaim = 1024

// Ready reports whether a pending job may be claimed at now, leaving out
// its concurrency key (which needs the other jobs; see KeyHolds).
func Ready(j contracts.Job, now time.Time) bool {
	return j.State == contracts.StatePending &&
		(j.ClaimUntil == nil || !j.ClaimUntil.After(now)) &&
		(j.NextDispatchAt == nil || !j.NextDispatchAt.After(now))
}

// KeyHolds reports whether j takes one of its concurrency key's slots at
// now: it runs, or it is pending under a live dispatch claim (it is being
// offered and may start any moment).
func KeyHolds(j contracts.Job, now time.Time) bool {
	switch j.State {
	case contracts.StateRunning:
		return true
	case contracts.StatePending:
		return j.ClaimUntil != nil && j.ClaimUntil.After(now)
	}
	return false
}

// FairAt is the fair-queue stamp of a tenant's new job (start-time fair
// queuing): it starts at the system's virtual time v (the largest fair_at
// dispatched so far) or right after the tenant's previous job, whichever is
// later, and a tenant of weight w advances 1/w per job. A tenant that queued
// 10,000 jobs has stamped them far ahead of v; another tenant's next job
// lands just after v and is taken first. The wall clock plays no part, so a
// burst submitted within one millisecond is spread out all the same.
func FairAt(v, tenantLast, weight float64) float64 {
	if weight <= 0 {
		weight = 1
	}
	return max(v, tenantLast) + 1/weight
}
