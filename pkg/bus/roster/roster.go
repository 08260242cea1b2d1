// Package roster keeps a live view of the workers from their announcements:
// who is up, which kinds each runs, and how many free slots each has. The
// scheduler offers jobs from it; the gateway shows it in /v1/stats.
package roster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// expiryIntervals is how many announce intervals a worker may stay silent
// before the roster forgets it.
const expiryIntervals = 3

// defaultInterval applies when an announcement gives none.
const defaultInterval = 5 * time.Second

// Roster is the set of live workers. It is safe for concurrent use.
type Roster struct {
	now     func() time.Time
	mu      sync.Mutex
	workers map[string]*entry
	changed chan struct{} // closed and replaced on every change
	// kindSeen is when a worker last announced each kind (or left while
	// running it).
	kindSeen map[string]time.Time
	// index follows which workers have room (see open.go).
	index openIndex
}

type entry struct {
	info    contracts.WorkerInfo
	expires time.Time
	// seq is the Seq of the newest load report taken (0: unordered).
	seq uint64
}

// staleWindow is how far behind the last report taken a numbered report
// may be and still count as older. A reply overtaken by announcements is
// behind by the slot changes in between: thousands at most. A report
// further behind is from a new process of the worker whose numbers start
// lower (it restarted after its clock was set back), and is taken.
const staleWindow = 1 << 20

// stale reports whether a load report numbered seq is older than the one
// the entry holds; unnumbered reports never are.
func (e *entry) stale(seq uint64) bool {
	return seq != 0 && seq < e.seq && e.seq-seq <= staleWindow
}

// New returns an empty roster that reads the time from now.
func New(now func() time.Time) *Roster {
	if now == nil {
		now = time.Now
	}
	return &Roster{now: now, workers: map[string]*entry{}, changed: make(chan struct{}), kindSeen: map[string]time.Time{},
		index: newOpenIndex()}
}

// Observe records an announcement. A leaving worker is removed at once.
// An announcement older than the last load report taken from its worker
// (a lower Seq) renews the worker but keeps the newer in-flight count.
func (r *Roster) Observe(a contracts.Announce) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range a.Kinds {
		r.kindSeen[k] = now
	}
	if a.Leaving {
		r.remove(a.WorkerID)
		return
	}
	iv := time.Duration(a.IntervalMS) * time.Millisecond
	if iv <= 0 {
		iv = defaultInterval
	}
	e, ok := r.workers[a.WorkerID]
	if !ok {
		e = &entry{}
		r.workers[a.WorkerID] = e
	}
	// Most announcements only say a worker is still there: they renew it
	// without waking anyone. A thousand workers announce a thousand times
	// a second; waking the dispatchers for each would have them look at
	// the whole roster as often.
	if ok && e.stale(a.Seq) {
		a.InFlight, a.FreeResources = e.info.InFlight, e.info.FreeResources
	} else {
		e.seq = a.Seq
	}
	changed := !ok || !sameOffer(e.info, a)
	if changed || now.After(e.expires) {
		r.notify()
	}
	e.expires = now.Add(expiryIntervals * iv)
	if !changed {
		// The open index already holds the worker as it is.
		e.info.Spawned, e.info.SeenAt = a.Spawned, now
		return
	}
	before := e.info
	e.info = contracts.WorkerInfo{
		ID: a.WorkerID, Kinds: slices.Clone(a.Kinds), Capacity: a.Capacity,
		InFlight: a.InFlight, Draining: a.Draining, Spawned: a.Spawned, Version: a.Version, SeenAt: now,
		Resources: a.Resources, FreeResources: a.FreeResources, KindResources: a.KindResources,
		Isolation: a.Isolation,
	}
	r.index.set(before, e.info)
}

// sameOffer reports whether an announcement changes nothing a dispatcher
// reads of the worker: its kinds, slots, load, draining, version and
// resources.
func sameOffer(w contracts.WorkerInfo, a contracts.Announce) bool {
	return w.Capacity == a.Capacity && w.InFlight == a.InFlight && w.Draining == a.Draining &&
		w.Version == a.Version && slices.Equal(w.Kinds, a.Kinds) &&
		sameResources(w.Resources, a.Resources) && sameResources(w.FreeResources, a.FreeResources) &&
		maps.Equal(w.KindResources, a.KindResources) && w.Isolation == a.Isolation
}

// sameResources reports whether two optional amounts are both absent or
// equal.
func sameResources(a, b *contracts.Resources) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Load updates a known worker's in-flight count, and its free resources
// when free is not nil, from an offer reply numbered seq
// (contracts.OfferReply.Seq) without renewing its liveness. A reply older
// than the worker's last load report taken is ignored: a reply and an
// announcement travel by different routes, and the older must not undo
// the newer.
func (r *Roster) Load(id string, inFlight, capacity int, free *contracts.Resources, seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.workers[id]
	if !ok || e.stale(seq) {
		return
	}
	e.seq = seq
	if free == nil {
		free = e.info.FreeResources
	}
	if e.info.InFlight != inFlight || e.info.Capacity != capacity || !sameResources(e.info.FreeResources, free) {
		before := e.info
		e.info.InFlight, e.info.Capacity, e.info.FreeResources = inFlight, capacity, free
		r.index.set(before, e.info)
		r.notify()
	}
}

// Remove forgets a worker until it announces itself again (eviction).
func (r *Roster) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.remove(id)
}

// KindLastSeen is when a live worker last ran kind: now while one does,
// else when the last one announced it or left; zero if none ever did.
func (r *Roster) KindLastSeen(kind string) time.Time {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.workers {
		if !now.After(e.expires) && slices.Contains(e.info.Kinds, kind) {
			return now
		}
	}
	return r.kindSeen[kind]
}

// remove forgets a worker, waking waiters only if it was known; r.mu is held.
func (r *Roster) remove(id string) {
	if e, ok := r.workers[id]; ok {
		now := r.now()
		for _, k := range e.info.Kinds {
			r.kindSeen[k] = now
		}
		r.index.set(e.info, contracts.WorkerInfo{})
		delete(r.workers, id)
		r.notify()
	}
}

// notify wakes everyone waiting on Changed; r.mu is held.
func (r *Roster) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the roster: a
// worker appeared (or came back after expiring), left, or reported a
// different load, kinds, draining or version. An announcement that only
// renews a worker wakes no one.
func (r *Roster) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Get returns one live worker.
func (r *Roster) Get(id string) (contracts.WorkerInfo, bool) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.workers[id]
	if !ok || now.After(e.expires) {
		return contracts.WorkerInfo{}, false
	}
	return e.info, true
}

// Workers returns the live workers sorted by id, dropping the expired ones.
func (r *Roster) Workers() []contracts.WorkerInfo {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(now)
	out := make([]contracts.WorkerInfo, 0, len(r.workers))
	for _, e := range r.workers {
		out = append(out, e.info)
	}
	slices.SortFunc(out, func(a, b contracts.WorkerInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// decoded remembers the announcements already decoded, by their bytes: a
// worker repeats the same one every interval while its state holds, and
// decoding (strict JSON, then every field checked) is most of what an
// announcement costs. A trailing "seq" member is left out of the key (and
// put back into what is found): numbered announcements of a worker going
// back and forth between the same few states are found too, and the
// memory holds one entry per state, not one per announcement. Only the
// subscription's goroutine uses it.
type decoded struct {
	m   map[string]contracts.Announce
	key []byte // scratch for the key of a numbered announcement
}

// maxDecoded bounds the announcements remembered; past it the memory
// starts again.
const maxDecoded = 1 << 16

// decode returns the announcement in b, decoding it only if no earlier
// announcement had the same bytes (but for a trailing seq).
func (d *decoded) decode(b []byte) (contracts.Announce, error) {
	key, seq, numbered := d.keyOf(b)
	if a, ok := d.m[string(key)]; ok {
		if numbered {
			a.Seq = seq
		}
		return a, nil
	}
	a, err := contracts.DecodeAnnounce(b)
	if err != nil {
		return a, err
	}
	if d.m == nil || len(d.m) >= maxDecoded {
		d.m = make(map[string]contracts.Announce)
	}
	stored := a
	if numbered {
		stored.Seq = 0
	}
	d.m[string(key)] = stored
	return a, nil
}

// keyOf returns b's cache key: b without its trailing seq member when it
// has one (then also the seq), else b (contracts.SplitAnnounce, whose
// rest decodes as b does but for Seq, so what is found under the key is
// the announcement).
func (d *decoded) keyOf(b []byte) (key []byte, seq uint64, numbered bool) {
	rest, seq, ok := contracts.SplitAnnounce(d.key[:0], b)
	if !ok {
		return b, 0, false
	}
	d.key = rest
	return rest, seq, true
}

// Subscribe feeds the roster from announcements on nc and asks every worker
// to announce itself now. The subscription lives until ctx ends. Each
// worker announces on its own subject (contracts.AnnounceSubject); an
// announcement that names another worker than its subject is ignored, so
// that one worker's NATS identity cannot announce, drain or remove
// another.
func (r *Roster) Subscribe(ctx context.Context, nc *nats.Conn) error {
	var seen decoded
	sub, err := nc.Subscribe(contracts.AnnounceSubjects, func(m *nats.Msg) {
		a, err := seen.decode(m.Data)
		if err != nil {
			return // a malformed announcement changes nothing
		}
		if id, ok := contracts.ReportingWorker(m.Subject); !ok || id != a.WorkerID {
			return // not its own subject: another worker's identity
		}
		r.Observe(a)
	})
	if err != nil {
		return fmt.Errorf("roster: subscribe %s: %w", contracts.AnnounceSubjects, err)
	}
	if err := nc.Publish(contracts.SubjectDiscover, nil); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("roster: publish %s: %w", contracts.SubjectDiscover, err)
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}
