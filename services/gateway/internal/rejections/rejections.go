// Package rejections remembers the gateway's latest 429 answers (admission
// caps and rate limits) in a small ring buffer, for GET /v1/stats and the
// dashboard. It is a view for people, not a record: it lives in memory,
// holds only the last few, and each gateway has its own.
package rejections

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Log is a bounded ring of rejections, safe for concurrent use. A nil *Log
// records nothing and lists nothing, so wiring it is optional.
type Log struct {
	mu   sync.Mutex
	now  func() time.Time
	ring []contracts.Rejection
	next int // where the next rejection goes
	full bool
}

// New returns a Log keeping the last size rejections (at least one),
// stamping them with now (nil = time.Now).
func New(size int, now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	return &Log{now: now, ring: make([]contracts.Rejection, max(size, 1))}
}

// Record remembers one rejection, dropping the oldest when the ring is
// full. A zero At is set to now.
func (l *Log) Record(r contracts.Rejection) {
	if l == nil {
		return
	}
	if r.At.IsZero() {
		r.At = l.now().UTC()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = r
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
}

// Recent lists the remembered rejections newest first: every one when all
// is true (open mode), otherwise only tenant's. It never returns nil.
func (l *Log) Recent(tenant string, all bool) []contracts.Rejection {
	out := []contracts.Rejection{}
	if l == nil {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	for i := range n {
		r := l.ring[(l.next-1-i+len(l.ring))%len(l.ring)]
		if all || r.Tenant == tenant {
			out = append(out, r)
		}
	}
	return slices.Clip(out)
}
