package roster_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
)

// TestOpenAndRoomFollowEveryChange drives a roster through random
// announcements, loads, removals, departures and expiries, and after each
// step compares Open and Room with what the full worker list says.
func TestOpenAndRoomFollowEveryChange(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []string{"a", "b", "c"}
	for step := range 5000 {
		id := fmt.Sprintf("w%02d", rng.IntN(40))
		switch op := rng.IntN(10); {
		case op < 5:
			var ks []string
			for _, k := range kinds {
				if rng.IntN(2) == 0 {
					ks = append(ks, k)
				}
			}
			capacity := rng.IntN(4)
			r.Observe(contracts.Announce{WorkerID: id, Kinds: ks, Capacity: capacity, InFlight: rng.IntN(capacity + 2),
				Draining: rng.IntN(8) == 0, IntervalMS: 1000})
		case op < 7:
			r.Load(id, rng.IntN(4), rng.IntN(4), nil, 0)
		case op < 8:
			r.Remove(id)
		case op < 9:
			r.Observe(contracts.Announce{WorkerID: id, Leaving: true})
		default:
			c.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		requireIndexMatches(t, r, kinds, step)
	}
}

// requireIndexMatches compares Open and Room with the worker list.
func requireIndexMatches(t *testing.T, r *roster.Roster, kinds []string, step int) {
	t.Helper()
	room := map[string]int{}
	open := map[string][]string{}
	for _, w := range r.Workers() {
		if w.Draining {
			continue
		}
		f := roster.UnlimitedRoom
		if w.Capacity > 0 {
			f = w.Capacity - w.InFlight
		}
		if f <= 0 {
			continue
		}
		for _, k := range w.Kinds {
			room[k] += f
			open[k] = append(open[k], w.ID)
		}
	}
	require.Equal(t, room, r.Room(), "step %d: room", step)
	for _, k := range kinds {
		var got []string
		r.Open(k, func(w contracts.WorkerInfo) bool {
			got = append(got, w.ID)
			return true
		})
		require.Equal(t, open[k], got, "step %d: open workers of %s", step, k)
		require.True(t, slices.IsSorted(got))
	}
}

// TestOpenStopsEarly: fn returning false ends the walk, also across the
// pages Open reads the index by.
func TestOpenStopsEarly(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	for i := range 300 {
		r.Observe(contracts.Announce{WorkerID: fmt.Sprintf("w%03d", i), Kinds: []string{"k"}, Capacity: 1, IntervalMS: 1000})
	}
	var seen []string
	r.Open("k", func(w contracts.WorkerInfo) bool {
		seen = append(seen, w.ID)
		return len(seen) < 100
	})
	require.Len(t, seen, 100)
	require.Equal(t, "w099", seen[99])
	n := 0
	r.Open("k", func(contracts.WorkerInfo) bool { n++; return true })
	require.Equal(t, 300, n)
	r.Open("none", func(contracts.WorkerInfo) bool { t.Fatal("no worker runs none"); return false })
}

// BenchmarkOpen is the dispatcher's look at the roster for one job: the
// room per kind, then the first open worker, with n single-slot workers
// of which 90% are busy. It stays flat from 100 to 10,000 workers.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := roster.New(clocktest.New().Now)
			for i := range n {
				inFlight := 0
				if i < n*9/10 {
					inFlight = 1
				}
				r.Observe(contracts.Announce{WorkerID: fmt.Sprintf("w%05d", i), Kinds: []string{"k"}, Capacity: 1,
					InFlight: inFlight, IntervalMS: 1000})
			}
			b.ResetTimer()
			for i := range b.N {
				_ = r.Room()
				r.Open("k", func(contracts.WorkerInfo) bool { return false })
				// One worker takes a job and another frees its slot.
				id := fmt.Sprintf("w%05d", n*9/10+i%(n/10))
				r.Load(id, 1, 1, nil, 0)
				r.Load(id, 0, 1, nil, 0)
			}
		})
	}
}

// BenchmarkRenew is one announcement that only says a worker is still
// there, among 10,000 workers of which 10% have a free slot: what most of
// a large fleet's announcements are.
func BenchmarkRenew(b *testing.B) {
	const n = 10000
	r := roster.New(clocktest.New().Now)
	ann := make([]contracts.Announce, n)
	for i := range ann {
		ann[i] = contracts.Announce{WorkerID: fmt.Sprintf("w%05d", i), Kinds: []string{"k"}, Capacity: 1,
			InFlight: min(1, i%10), IntervalMS: 1000}
		r.Observe(ann[i])
	}
	b.ResetTimer()
	for i := range b.N {
		r.Observe(ann[i%n])
	}
}
