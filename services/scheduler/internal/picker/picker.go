// Package picker decides which workers a job is offered to and in which
// order: every live worker that runs the job's kind, sorted by worker id (a
// stable priority order, so load concentrates on the low-ordered workers and
// the tail drains to idle), skipping workers the view says are full.
// Outcomes of offers feed back into the view: busy answers and acceptances
// update a worker's load, repeated errors and timeouts evict it until it
// announces itself again.
package picker

import (
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Outcome is how one offer to one worker ended.
type Outcome int

// Offer outcomes.
const (
	Accepted Outcome = iota + 1
	Busy
	Refused
	NoResponders
	Timeout
	Failed // transport or decoding error
	// NotSent means the offer never left this scheduler (too large for
	// the bus, connection closed): not the worker's doing, so it counts
	// nothing against it.
	NotSent
)

// String names the outcome for metrics and logs.
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Busy:
		return "busy"
	case Refused:
		return "refused"
	case NoResponders:
		return "no_responders"
	case Timeout:
		return "timeout"
	case Failed:
		return "error"
	case NotSent:
		return "not_sent"
	}
	return "unknown"
}

// View is the live worker list the picker reads and corrects; roster.Roster
// implements it. Open and Room answer without a look at every worker.
type View interface {
	Workers() []contracts.WorkerInfo
	// Open calls fn with the live, not draining workers of kind that have
	// a free slot, in id order, until fn returns false.
	Open(kind string, fn func(contracts.WorkerInfo) bool)
	// Room is the free slots per kind of the live, not draining workers.
	Room() map[string]int
	Get(id string) (contracts.WorkerInfo, bool)
	Load(id string, inFlight, capacity int, free *contracts.Resources, seq uint64)
	Remove(id string)
	Changed() <-chan struct{}
	// KindLastSeen is when a live worker last ran kind (zero: never).
	KindLastSeen(kind string) time.Time
}

// DefaultEvictAfter is how many failed offers in a row evict a worker.
const DefaultEvictAfter = 3

// Picker orders workers for offers and learns from the outcomes.
type Picker struct {
	view       View
	evictAfter int

	mu       sync.Mutex
	failures map[string]int
	// pending counts offers in flight per worker: slots this scheduler is
	// about to fill, so concurrent dispatches do not all offer the same one.
	pending map[string]int
	// pendingKinds is pending summed per kind (a worker's reservations
	// count for each kind it runs), and kindsOf the kinds of the workers
	// with reservations, as they were at the first one.
	pendingKinds map[string]int
	kindsOf      map[string][]string
	freed        chan struct{} // closed and replaced when a reservation ends
}

// New returns a picker over view; evictAfter ≤ 0 uses DefaultEvictAfter.
func New(view View, evictAfter int) *Picker {
	if evictAfter <= 0 {
		evictAfter = DefaultEvictAfter
	}
	return &Picker{view: view, evictAfter: evictAfter, failures: map[string]int{}, pending: map[string]int{},
		pendingKinds: map[string]int{}, kindsOf: map[string][]string{}, freed: make(chan struct{})}
}

// Candidates returns, in stable worker-id order, up to limit workers to
// offer a job of this kind to: live, not draining, running the kind, and
// with a free slot as far as the view knows, less the offers in flight. An
// empty list means overflow without a single request. It costs O(log n)
// plus the workers it looks at, not a pass over every worker.
func (p *Picker) Candidates(kind string, limit int) []string {
	var ids []string
	p.view.Open(kind, func(w contracts.WorkerInfo) bool {
		if len(ids) >= limit {
			return false
		}
		p.mu.Lock()
		room := hasRoom(w, p.pending[w.ID])
		p.mu.Unlock()
		if room {
			ids = append(ids, w.ID)
		}
		return true
	})
	return ids
}

// Room says how many jobs of each kind the live workers have free slots
// for, as far as the view knows, less the offers in flight. A worker that
// runs several kinds counts its free slots for each of them. It costs
// O(kinds).
func (p *Picker) Room() map[string]int {
	room := p.view.Room()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range p.pendingKinds {
		if room[k] -= n; room[k] <= 0 {
			delete(room, k)
		}
	}
	return room
}

// hasRoom reports whether w has a free slot as far as the view knows (the
// roster's rule, roster.FreeSlots) beyond the pending offers to it.
func hasRoom(w contracts.WorkerInfo, pending int) bool { return roster.FreeSlots(w) > pending }

// Slots reserves up to n free slots of the workers that run kind; see
// SlotsFor.
func (p *Picker) Slots(kind string, n int) []string {
	return p.SlotsFor(map[string]int{kind: n}).Lists[kind]
}

// Reservation is what SlotsFor reserved for a claim.
type Reservation struct {
	// Lists are, per kind, the slots in stable order (a worker once per
	// slot).
	Lists map[string][]string
	// Reserved is, per worker, how many of its slots were reserved.
	Reserved map[string]int
	// Capacity is, per worker reserved, the slots it announced in all (0:
	// no bound), as the view held it when its slots were reserved.
	Capacity map[string]int
	// Resources is, per worker reserved that counts resources, what it
	// announced it has, and Defaults what it counts for a job that
	// declares none (contracts.WorkerInfo.Defaults): what the claim packs
	// its jobs by (store.ClaimRequest.Resources).
	Resources map[string]contracts.Resources
	Defaults  map[string]contracts.ResourceDefaults
}

// SlotsFor reserves free slots for a claim of up to want[kind] jobs of each
// kind and returns, per kind, the slots in stable worker-id order (the
// first worker's free slots first, a worker once per slot), and, per
// worker, how many of its slots it reserved and its capacity. A worker that runs several
// kinds is listed for each with the same free slots, reserved once: the
// claim gives it no more jobs in all than it reserved
// (store.ClaimRequest.Room), to whichever kinds have ready jobs. These are
// the slots a claim fills; every reservation is ended by a ReleaseN (a
// job's answer) or an Unreserve (a slot no job filled).
//
// A worker whose last offers failed (no answer, timeout, error) comes
// last, and gets one slot at a time, until it answers again or is
// evicted: one job at a time tests it while the others go on to workers
// that answer.
func (p *Picker) SlotsFor(want map[string]int) Reservation {
	kinds := make([]string, 0, len(want))
	for k, n := range want {
		if n > 0 {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	lists := map[string][]string{}
	reserved := map[string]int{}
	infos := map[string]contracts.WorkerInfo{}
	// The view pages its workers without its lock held, and never calls
	// the picker: holding p.mu here orders the locks one way only.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, kind := range kinds {
		n := want[kind]
		var (
			list     []string
			suspects []contracts.WorkerInfo
		)
		p.view.Open(kind, func(w contracts.WorkerInfo) bool {
			if len(list) >= n {
				return false
			}
			free := roster.FreeSlots(w) - p.pending[w.ID]
			switch {
			case free <= 0:
			case p.failures[w.ID] > 0:
				if p.pending[w.ID] == 0 {
					suspects = append(suspects, w)
				}
			default:
				take := min(free, n-len(list))
				for range take {
					list = append(list, w.ID)
				}
				reserved[w.ID] = max(reserved[w.ID], take)
				infos[w.ID] = w
			}
			return true
		})
		for _, w := range suspects {
			if len(list) >= n {
				break
			}
			list = append(list, w.ID)
			reserved[w.ID] = max(reserved[w.ID], 1)
			infos[w.ID] = w
		}
		if len(list) > 0 {
			lists[kind] = list
		}
	}
	capacity := make(map[string]int, len(reserved))
	var (
		resources map[string]contracts.Resources
		defaults  map[string]contracts.ResourceDefaults
	)
	for id, n := range reserved {
		capacity[id] = infos[id].Capacity
		if w := infos[id]; w.Resources != nil {
			if resources == nil {
				resources, defaults = map[string]contracts.Resources{}, map[string]contracts.ResourceDefaults{}
			}
			resources[id], defaults[id] = *w.Resources, w.Defaults()
		}
		if p.pending[id] == 0 {
			p.kindsOf[id] = infos[id].Kinds
		}
		p.pending[id] += n
		for _, k := range p.kindsOf[id] {
			p.pendingKinds[k] += n
		}
	}
	return Reservation{Lists: lists, Reserved: reserved, Capacity: capacity, Resources: resources, Defaults: defaults}
}

// ReleaseN ends n reservations of a worker (Slots; after Record has applied
// the worker's answer to the request they were for) and wakes dispatches
// waiting for room.
func (p *Picker) ReleaseN(id string, n int) { p.release(id, n, true) }

// Unreserve ends n reservations of a worker that no job filled (a claim
// found fewer ready jobs than slots). It wakes no one: the room is what it
// was before they were taken, and a dispatch woken for it would claim again
// for nothing.
func (p *Picker) Unreserve(id string, n int) { p.release(id, n, false) }

// release ends n reservations of a worker, waking the dispatches waiting
// for room when wake is set.
func (p *Picker) release(id string, n int, wake bool) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, p.pending[id])
	for _, k := range p.kindsOf[id] {
		if p.pendingKinds[k] -= n; p.pendingKinds[k] <= 0 {
			delete(p.pendingKinds, k)
		}
	}
	if p.pending[id] <= n {
		delete(p.pending, id)
		delete(p.kindsOf, id)
	} else {
		p.pending[id] -= n
	}
	if wake {
		close(p.freed)
		p.freed = make(chan struct{})
	}
}

// Changed returns channels closed when room may have appeared: a roster
// change or the end of a reservation.
func (p *Picker) Changed() (view, released <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view.Changed(), p.freed
}

// Record feeds one offer's outcome back. reply is the worker's answer when
// there was one. It reports whether the worker was evicted.
func (p *Picker) Record(id string, o Outcome, reply *contracts.OfferReply) bool {
	switch o {
	case Accepted, Busy, Refused:
		p.mu.Lock()
		delete(p.failures, id)
		p.mu.Unlock()
		if reply != nil {
			p.view.Load(id, reply.InFlight, reply.Capacity, reply.FreeResources, reply.Seq)
		}
	case NoResponders, Timeout, Failed:
		p.mu.Lock()
		p.failures[id]++
		evict := p.failures[id] >= p.evictAfter
		if evict {
			delete(p.failures, id)
		}
		p.mu.Unlock()
		if evict {
			p.view.Remove(id)
		}
		return evict
	}
	return false
}

// Failures returns a worker's current count of failed offers in a row.
func (p *Picker) Failures(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures[id]
}

// KindLastSeen is when a live worker last ran kind: now while one does,
// zero if none ever did since this scheduler started.
func (p *Picker) KindLastSeen(kind string) time.Time { return p.view.KindLastSeen(kind) }
