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
	// Resources are, per worker, what the claim packs its jobs by (see
	// Slots); a worker absent is bounded by its slots only.
	Resources map[string]WorkerResources
	// Clock, when set, is read as the claimed jobs start, inside the
	// store's write: a claim that waited behind other writes (a result
	// that freed a fan-out's next child, say) never records a start
	// before them. Nil starts them at Now.
	Clock func() time.Time
}

// WorkerResources is what a claim packs one worker's jobs by: the
// resources it has in all (its announced capacity) and what it counts
// for the amounts a job leaves out (contracts.ResourceDefaults).
type WorkerResources struct {
	Capacity contracts.Resources
	Defaults contracts.ResourceDefaults
}

// RunningJob is a job the store shows running on a worker, as a claim
// counts what it takes of the worker's resources.
type RunningJob struct {
	Kind      string
	Resources *contracts.Resources
}

// RunningOn is how NewSlots reads what the store shows running on a
// worker, in the same store transaction as the claim where the driver has
// one.
type RunningOn struct {
	// Count counts the jobs running on a worker.
	Count func(worker string) (int, error)
	// Jobs lists them, for a worker the claim packs by resources (one in
	// ClaimRequest.Resources): their count is then len of the list.
	Jobs func(worker string) ([]RunningJob, error)
}

// Slots hands out a claim's worker slots as the claim takes jobs, kind by
// kind, and never gives a worker more than its room: Room[worker] (the
// slots the scheduler reserved on it, shared by every kind it runs;
// absent, its entries in Slots), bounded, when its Capacity is known, by
// that capacity less the jobs the store shows running on it. A worker that
// runs several kinds is listed for each, and whichever kind has ready jobs
// takes its room first.
//
// Packing by resources: a worker in ClaimRequest.Resources also has free
// resources, its capacity less what the jobs the store shows running on it
// take (each its declaration, the amounts it leaves out at the worker's
// defaults: contracts.ResourceDefaults.Need, the worker's own rule). Each
// job, in claim order, goes to the first worker of its kind's slots (in
// worker-id order) with room left whose free resources fit it, and takes
// them: load still gathers on the first workers. A worker not in
// Resources counts slots only.
//
// Anti-starvation: a job that fits no worker now (Fit says wait) holds,
// for the rest of the claim, the first worker of its kind whose whole
// capacity could hold it and that no other job holds: no job after it in
// claim order (smaller ones of the same priority, or any of a lower one)
// is placed there. That worker's running jobs end, nothing new starts on
// it, and the waiting job, still first in claim order, fits there in a
// later claim. One worker per kind is held at most, so the jobs behind a
// big one still run on the others.
type Slots struct {
	order map[string][]string // kind → its workers, in slot order, each once
	start map[string]int      // kind → the first of them that may have room
	room  map[string]int
	res   map[string]*packing
	// held are the workers held for a job that fits nowhere now; holds
	// the kinds that hold one.
	held  map[string]bool
	holds map[string]bool
}

// packing is a worker's resources during one claim.
type packing struct {
	WorkerResources
	free contracts.Resources
}

// NewSlots returns r's slots, with each bounded worker's running jobs
// counted once through running.
func (r ClaimRequest) NewSlots(running RunningOn) (*Slots, error) {
	s := &Slots{order: map[string][]string{}, start: map[string]int{}, room: map[string]int{},
		res: map[string]*packing{}, held: map[string]bool{}, holds: map[string]bool{}}
	entries := map[string]int{}
	for kind, list := range r.Slots {
		seen := map[string]bool{}
		for _, w := range list {
			entries[w]++
			if !seen[w] {
				seen[w] = true
				s.order[kind] = append(s.order[kind], w)
			}
		}
	}
	for w, n := range entries {
		if room, ok := r.Room[w]; ok {
			n = room
		}
		wr, packs := r.Resources[w]
		c := r.Capacity[w]
		switch {
		case packs && running.Jobs != nil:
			jobs, err := running.Jobs(w)
			if err != nil {
				return nil, err
			}
			p := &packing{WorkerResources: wr, free: wr.Capacity}
			for _, j := range jobs {
				p.free = p.free.Sub(wr.Defaults.Need(j.Kind, j.Resources))
			}
			s.res[w] = p
			if c > 0 {
				n = min(n, c-len(jobs))
			}
		case c > 0:
			busy, err := running.Count(w)
			if err != nil {
				return nil, err
			}
			n = min(n, c-busy)
		}
		s.room[w] = max(n, 0)
	}
	return s, nil
}

// Fit returns the worker a job of kind that declared declared (nil:
// nothing) goes to, without taking it: the first of kind's workers with
// room left, not held, whose free resources fit it (see Slots). ok false
// and more true: it fits none now (the job waits; it holds a worker if
// none of its kind is held yet); more false: no worker of kind has room
// left for any job.
func (s *Slots) Fit(kind string, declared *contracts.Resources) (worker string, ok, more bool) {
	order := s.order[kind]
	for i := s.start[kind]; i < len(order); i++ {
		w := order[i]
		if s.room[w] <= 0 {
			if i == s.start[kind] {
				s.start[kind]++ // never room again in this claim
			}
			continue
		}
		if s.held[w] {
			continue
		}
		more = true
		p := s.res[w]
		if p == nil || p.Defaults.Need(kind, declared).Fits(p.free) {
			return w, true, true
		}
	}
	if more && !s.holds[kind] {
		for _, w := range order {
			if p := s.res[w]; p != nil && !s.held[w] && p.Defaults.Need(kind, declared).Fits(p.Capacity) {
				s.held[w], s.holds[kind] = true, true
				break
			}
		}
	}
	return "", false, more
}

// Take takes what a job of kind that declared declared needs of worker,
// which Fit returned for it: the job was claimed there.
func (s *Slots) Take(kind, worker string, declared *contracts.Resources) {
	s.room[worker]--
	if p := s.res[worker]; p != nil {
		p.free = p.free.Sub(p.Defaults.Need(kind, declared))
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
