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

// ClaimRequest asks Claim for the best ready jobs, each for a worker slot
// the scheduler knows to be free: a claimed job starts running at once on
// the slot it was given (see Started).
type ClaimRequest struct {
	// Now decides which jobs are ready; zero is the current time. It is
	// also when the claimed jobs start.
	Now time.Time
	// Slots lists, for each kind, the worker slots to fill, best first: a
	// job claimed of a kind runs on the next of them whose worker has room
	// left (see Room). A worker appears once for each of its free slots. A
	// kind gets at most MaxClaim jobs.
	Slots map[string][]string
	// Room is the most jobs the claim may give each worker in all kinds:
	// the slots the scheduler reserved on it. A worker that runs several
	// kinds is listed in Slots for each, its room shared (see Slots).
	// Absent: its entries in Slots.
	Room map[string]int
	// Capacity is the slots each worker has in all, as it announced them
	// (absent or 0: no bound). The claim gives a worker no more jobs than
	// its capacity less the jobs the store shows running on it, so the
	// store never shows a worker running more jobs than it has slots,
	// whichever schedulers claim at once.
	Capacity map[string]int
	// Clock, when set, is read as the claimed jobs start, inside the
	// store's write: a claim that waited behind other writes (a result
	// that freed a fan-out's next child, say) never records a start
	// before them. Nil starts them at Now.
	Clock func() time.Time
}

// Slots hands out a claim's worker slots as the claim takes jobs, kind by
// kind, each kind's slots in their order, and never gives a worker more
// than its room: Room[worker] (the slots the scheduler reserved on it,
// shared by every kind it runs; absent, its entries in Slots), bounded,
// when its Capacity is known, by that capacity less the jobs the store
// shows running on it. A worker that runs several kinds is listed for each,
// and whichever kind has ready jobs takes its room first.
type Slots struct {
	lists map[string][]string
	next  map[string]int
	room  map[string]int
}

// NewSlots returns r's slots, with each bounded worker's running jobs
// counted by running (once per worker), in the same store transaction as
// the claim where the driver has one.
func (r ClaimRequest) NewSlots(running func(worker string) (int, error)) (*Slots, error) {
	s := &Slots{lists: r.Slots, next: map[string]int{}, room: map[string]int{}}
	entries := map[string]int{}
	for _, list := range r.Slots {
		for _, w := range list {
			entries[w]++
		}
	}
	for w, n := range entries {
		if room, ok := r.Room[w]; ok {
			n = room
		}
		if c := r.Capacity[w]; c > 0 {
			busy, err := running(w)
			if err != nil {
				return nil, err
			}
			n = min(n, c-busy)
		}
		s.room[w] = max(n, 0)
	}
	return s, nil
}

// Peek returns the worker of kind's next slot that has room left, without
// taking it; false when kind has none left.
func (s *Slots) Peek(kind string) (string, bool) {
	list := s.lists[kind]
	for s.next[kind] < len(list) {
		if w := list[s.next[kind]]; s.room[w] > 0 {
			return w, true
		}
		s.next[kind]++
	}
	return "", false
}

// Take takes the slot Peek returned for kind: a job was claimed into it.
func (s *Slots) Take(kind string) {
	if w, ok := s.Peek(kind); ok {
		s.room[w]--
		s.next[kind]++
	}
}

// StartAt is when the jobs of a claim planned at now start: Clock's time
// when it is set and later than now, else now.
func (r ClaimRequest) StartAt(now time.Time) time.Time {
	if r.Clock != nil {
		if t := r.Clock(); t.After(now) {
			return t
		}
	}
	return now
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
	for k, slots := range r.Slots {
		if n := len(slots); n > 0 {
			kinds = append(kinds, k)
			want[k] = min(n, MaxClaim)
		}
	}
	sort.Strings(kinds)
	return now, kinds, want
}

// Started is what a claim makes of a ready job it gives to worker at now:
// running on that worker with the next claim (the fencing counter) and the
// next run number, started and heartbeat at now, no dispatch claim. Both
// drivers write exactly this, and return it without reading the job back.
func Started(j contracts.Job, worker string, now time.Time) contracts.Job {
	return StartChange(j, worker, now).Apply(j)
}

// StartChange is Started as a change of the job j read pending.
func StartChange(j contracts.Job, worker string, now time.Time) Change {
	at := now
	return Change{Now: now, State: contracts.StateRunning, Claim: j.Claim + 1, IncAttempt: true,
		Worker: &worker, ClearClaim: true, StartedAt: &at, HeartbeatAt: &at}
}

// ReleaseChange is the change that gives back a claimed job no worker
// took (busy, refused, or no answer): pending again as before its claim,
// the run it was given undone (Change.Unstart), at the same claim so that
// a worker that accepted after all, without its answer arriving, can still
// be fenced or confirmed by its first heartbeat. next, when not nil, is
// when it is ready again.
func ReleaseChange(now time.Time, next *time.Time) Change {
	return Change{Now: now, State: contracts.StatePending, Unstart: true, ClearClaim: true, NextDispatchAt: next}
}

// MaxClaim bounds the jobs one Claim takes of one kind.
const MaxClaim = 1024

// KeySlots keeps, during one Claim, how many jobs hold each tenant's
// concurrency key: a running job, or a pending job under a live dispatch
// claim (it is being offered and may start any moment). Each key is counted
// once, through count, the first time a candidate has it; the claims made
// afterwards are added here.
type KeySlots struct {
	count func(tenant, key string) (int, error)
	held  map[[2]string]int
}

// NewKeySlots returns an empty tally that counts a key's holders with count.
func NewKeySlots(count func(tenant, key string) (int, error)) *KeySlots {
	return &KeySlots{count: count, held: map[[2]string]int{}}
}

// Take reserves one slot of the tenant's key for a job about to be claimed
// and reports whether there was one under limit. A job without a key always
// gets one.
func (k *KeySlots) Take(tenant, key string, limit int) (bool, error) {
	if key == "" {
		return true, nil
	}
	id := [2]string{tenant, key}
	n, ok := k.held[id]
	if !ok {
		var err error
		if n, err = k.count(tenant, key); err != nil {
			return false, err
		}
		k.held[id] = n
	}
	if n >= limit {
		return false, nil
	}
	k.held[id] = n + 1
	return true, nil
}

// Give returns a slot Take reserved for a claim that did not happen.
func (k *KeySlots) Give(tenant, key string) {
	if key != "" {
		k.held[[2]string{tenant, key}]--
	}
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
