package sqlite

import (
	"sync"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite's page-sized buffers and modernc.org/sqlite's allocator.
//
// modernc.org/sqlite allocates through modernc.org/memory: objects of up
// to 16 KiB share 64 KiB mappings by size class (8 KiB objects seven to a
// mapping, 16 KiB ones three), and a mapping is unmapped the moment its
// last object is freed. A B-tree balance, which a claim's UPDATE runs
// every few dozen index entries it moves, allocates a page buffer and a
// scratch area of that size and frees them before it returns. Once the
// writer's page cache has filled every slot of those classes (its pages
// are objects of the 8 KiB class, kept for the life of the connection),
// each such buffer maps a new 64 KiB region (an mmap and two trims) and
// unmaps it again: four system calls per balance, most of the claim's
// system time in the burn-down's profile.
//
// reserve keeps free slots of those classes on mappings that stay: it
// allocates a few mappings' worth of objects of a class and frees all of
// them but the first on each mapping, which it holds until the next arm.
// The balances then take (and give back) the freed slots, and the held
// objects keep their mappings. Holding one object (tried before) is not
// enough: the page cache's new pages fill its mapping's free slots too,
// so each claim arms the reserve again. It holds about ten objects of
// each class, about a megabyte of mappings of which only the slots used
// are resident. modernc.org/memory's layout is its own: were it to
// change, the reserve would only stop helping (it allocates and frees
// through the engine's own sqlite3_malloc and sqlite3_free).

// reserveClasses are the object sizes reserved for: the 8 KiB class (a
// page buffer, 4 KiB and a header) and the 16 KiB class (a balance's
// scratch over pages of many small cells), each with the count of
// objects allocated to find free slots (several mappings' worth).
var reserveClasses = []struct{ size, count int }{
	{size: 4096 + 512, count: 64},
	{size: 8192 + 512, count: 24},
}

// allocPage is the size and alignment of modernc.org/memory's mappings:
// objects whose addresses share the bits above it share a mapping.
const allocPage = 1 << 16

// reserve holds one object on each of a few mappings of each reserved
// class; the writer alone arms it (see arm).
type reserve struct {
	mu   sync.Mutex
	tls  *libc.TLS
	held [][]uintptr
	tmp  []uintptr
}

// newReserve is a reserve holding nothing yet.
func newReserve() *reserve {
	return &reserve{tls: libc.NewTLS(), held: make([][]uintptr, len(reserveClasses))}
}

// arm makes sure each reserved class has free slots on mappings that
// stay mapped until the next arm or release: it allocates a few
// mappings' worth of objects (taking the free slots there are first, and
// mapping new regions only when too few are left), keeps the first
// object on each mapping, lets go of those it held before and frees the
// others.
func (r *reserve) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tls == nil {
		return // released
	}
	for i, c := range reserveClasses {
		old := r.held[i]
		r.held[i] = nil
		r.tmp = r.tmp[:0]
		for range c.count {
			p := sqlite3.Xsqlite3_malloc(r.tls, int32(c.size))
			if p == 0 {
				break
			}
			if r.holds(i, p) {
				r.tmp = append(r.tmp, p)
			} else {
				r.held[i] = append(r.held[i], p)
			}
		}
		// The old ones first: the slots freed last are taken first, and
		// those are on the mappings held now.
		for _, p := range old {
			sqlite3.Xsqlite3_free(r.tls, p)
		}
		for _, p := range r.tmp {
			sqlite3.Xsqlite3_free(r.tls, p)
		}
	}
}

// holds reports whether the reserve holds an object of class i on p's
// mapping.
func (r *reserve) holds(i int, p uintptr) bool {
	for _, h := range r.held[i] {
		if h/allocPage == p/allocPage {
			return true
		}
	}
	return false
}

// release frees what the reserve holds.
func (r *reserve) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ps := range r.held {
		for _, p := range ps {
			sqlite3.Xsqlite3_free(r.tls, p)
		}
		r.held[i] = nil
	}
	if r.tls != nil {
		r.tls.Close()
		r.tls = nil
	}
}
