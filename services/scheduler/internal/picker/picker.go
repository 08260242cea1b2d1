// Package picker decides which workers a job is offered to and in which
// order: every live worker that runs the job's kind, sorted by worker id (a
// stable priority order, so load concentrates on the low-ordered workers and
// the tail drains to idle), skipping workers the view says are full.
// Outcomes of offers feed back into the view: busy answers and acceptances
// update a worker's load, repeated errors and timeouts evict it until it
// announces itself again.
package picker

import (
	"slices"
	"sync"
	"time"

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
// implements it.
type View interface {
	Workers() []contracts.WorkerInfo
	Get(id string) (contracts.WorkerInfo, bool)
	Load(id string, inFlight, capacity int)
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
	freed   chan struct{} // closed and replaced when a reservation ends
}

// New returns a picker over view; evictAfter ≤ 0 uses DefaultEvictAfter.
func New(view View, evictAfter int) *Picker {
	if evictAfter <= 0 {
		evictAfter = DefaultEvictAfter
	}
	return &Picker{view: view, evictAfter: evictAfter, failures: map[string]int{}, pending: map[string]int{}, freed: make(chan struct{})}
}

// Candidates returns, in stable worker-id order, the workers to offer a job
// of this kind to: live, not draining, running the kind, and with a free
// slot as far as the view knows. An empty list means overflow without a
// single request. full counts the workers left out for being full.
func (p *Picker) Candidates(kind string) (ids []string, full int) {
	workers := p.view.Workers()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range workers {
		if w.Draining || !slices.Contains(w.Kinds, kind) {
			continue
		}
		if !hasRoom(w, p.pending[w.ID]) {
			full++
			continue
		}
		ids = append(ids, w.ID)
	}
	return ids, full
}

// UnlimitedRoom is the room Room counts for a worker with no slot limit.
const UnlimitedRoom = 64

// Room says how many jobs of each kind the live workers have free slots
// for, as far as the view knows, less the offers in flight. A worker that
// runs several kinds counts its free slots for each of them.
func (p *Picker) Room() map[string]int {
	workers := p.view.Workers()
	p.mu.Lock()
	defer p.mu.Unlock()
	room := map[string]int{}
	for _, w := range workers {
		if w.Draining {
			continue
		}
		free := freeSlots(w, p.pending[w.ID])
		if free <= 0 {
			continue
		}
		for _, k := range w.Kinds {
			room[k] += free
		}
	}
	return room
}

// freeSlots is how many more jobs a worker takes as far as the view knows,
// less the offers to it in flight; a worker with no limit counts
// UnlimitedRoom.
func freeSlots(w contracts.WorkerInfo, pending int) int {
	if w.Capacity == 0 {
		return UnlimitedRoom
	}
	return w.Capacity - w.InFlight - pending
}

func hasRoom(w contracts.WorkerInfo, pending int) bool { return freeSlots(w, pending) > 0 }

// Reserve takes one of a worker's free slots (as far as the view knows)
// for an offer about to be sent; false means it has none left. Every
// successful Reserve is ended by a ReleaseN that counts it.
func (p *Picker) Reserve(id string) bool {
	w, ok := p.view.Get(id)
	if !ok || w.Draining {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !hasRoom(w, p.pending[id]) {
		return false
	}
	p.pending[id]++
	return true
}

// ReleaseN ends n reservations of a worker (after Record has applied the
// worker's answer to the request they were for) and wakes dispatches
// waiting for room.
func (p *Picker) ReleaseN(id string, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[id] <= n {
		delete(p.pending, id)
	} else {
		p.pending[id] -= n
	}
	close(p.freed)
	p.freed = make(chan struct{})
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
			p.view.Load(id, reply.InFlight, reply.Capacity)
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
