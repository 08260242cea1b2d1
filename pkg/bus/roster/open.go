package roster

import (
	"time"

	"github.com/google/btree"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// UnlimitedRoom is the room a worker with no slot limit counts for, per
// kind it runs.
const UnlimitedRoom = 64

// pruneEvery is how often the index drops the workers that stopped
// announcing (reads skip them meanwhile).
const pruneEvery = time.Second

// openIndex answers the dispatcher's two questions without looking at every
// worker: which workers of a kind have a free slot, in id order (a B-tree
// per kind), and how many free slots each kind has (a sum per kind). Both
// follow every change of a worker's kinds, load or draining in O(log n).
type openIndex struct {
	open      map[string]*btree.BTreeG[string] // kind → ids of live workers with room, not draining
	room      map[string]int                   // kind → their free slots
	nextPrune time.Time
}

func newOpenIndex() openIndex {
	return openIndex{open: map[string]*btree.BTreeG[string]{}, room: map[string]int{}}
}

// FreeSlots is how many more jobs w takes as far as its announcement
// says: UnlimitedRoom with no slot limit, 0 when draining. Room sums it.
func FreeSlots(w contracts.WorkerInfo) int {
	switch {
	case w.Draining:
		return 0
	case w.Capacity == 0:
		return UnlimitedRoom
	}
	return max(w.Capacity-w.InFlight, 0)
}

// set moves a worker from what the index knew of it (zero when new) to
// now (zero when gone).
func (x *openIndex) set(before, now contracts.WorkerInfo) {
	if before.ID != "" {
		if f := FreeSlots(before); f > 0 {
			for _, k := range before.Kinds {
				x.room[k] -= f
				if t := x.open[k]; t != nil {
					t.Delete(before.ID)
				}
			}
		}
	}
	if now.ID != "" {
		if f := FreeSlots(now); f > 0 {
			for _, k := range now.Kinds {
				x.room[k] += f
				t := x.open[k]
				if t == nil {
					t = btree.NewG[string](32, func(a, b string) bool { return a < b })
					x.open[k] = t
				}
				t.ReplaceOrInsert(now.ID)
			}
		}
	}
}

// Open calls fn with each live worker that runs kind, is not draining and
// has a free slot as far as the roster knows, in id order, until fn
// returns false. It costs O(log n) plus the workers visited. fn runs
// without the roster's lock, a page of workers at a time.
func (r *Roster) Open(kind string, fn func(contracts.WorkerInfo) bool) {
	// Most walks stop at the first workers: the pages start small.
	const firstPage, maxPage = 4, 64
	now := r.now()
	var page []contracts.WorkerInfo
	for from, size := "", firstPage; ; size = min(2*size, maxPage) {
		page, from = r.openPage(kind, from, now, page[:0], size)
		for _, w := range page {
			if !fn(w) {
				return
			}
		}
		if from == "" {
			return
		}
	}
}

// openPage appends to page up to size open workers of kind from id from
// on, and returns the id to go on from ("" at the end).
func (r *Roster) openPage(kind, from string, now time.Time, page []contracts.WorkerInfo, size int) ([]contracts.WorkerInfo, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(now)
	t := r.index.open[kind]
	if t == nil {
		return page, ""
	}
	next := ""
	t.AscendGreaterOrEqual(from, func(id string) bool {
		if len(page) == size {
			next = id
			return false
		}
		if e := r.workers[id]; e != nil && !now.After(e.expires) {
			page = append(page, e.info)
		}
		return true
	})
	return page, next
}

// Room is the free slots per kind of the live workers, as far as their
// announcements and offer replies say (a worker that runs several kinds
// counts its free slots for each). It costs O(kinds).
func (r *Roster) Room() map[string]int {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(now)
	out := make(map[string]int, len(r.index.room))
	for k, n := range r.index.room {
		if n > 0 {
			out[k] = n
		}
	}
	return out
}

// pruneLocked forgets the workers that stopped announcing, at most once
// per pruneEvery; r.mu is held.
func (r *Roster) pruneLocked(now time.Time) {
	if !now.Before(r.index.nextPrune) {
		r.expireLocked(now)
	}
}

// expireLocked forgets the workers that stopped announcing; r.mu is held.
func (r *Roster) expireLocked(now time.Time) {
	r.index.nextPrune = now.Add(pruneEvery)
	for id, e := range r.workers {
		if now.After(e.expires) {
			r.index.set(e.info, contracts.WorkerInfo{})
			delete(r.workers, id)
		}
	}
}
