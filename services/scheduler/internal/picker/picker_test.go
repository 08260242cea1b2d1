package picker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func setup(t *testing.T, workers ...contracts.Announce) (*Picker, *roster.Roster) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	r := roster.New(func() time.Time { return now })
	for _, w := range workers {
		if w.Kinds == nil {
			w.Kinds = []string{"sleep"}
		}
		w.IntervalMS = 1000
		r.Observe(w)
	}
	return New(r, 3), r
}

func TestCandidatesStableOrder(t *testing.T) {
	t.Parallel()
	p, _ := setup(t,
		contracts.Announce{WorkerID: "w-c", Capacity: 1},
		contracts.Announce{WorkerID: "w-a", Capacity: 1},
		contracts.Announce{WorkerID: "w-b", Capacity: 1},
	)
	for range 5 {
		require.Equal(t, []string{"w-a", "w-b", "w-c"}, p.Candidates("sleep", 10))
	}
	require.Equal(t, []string{"w-a", "w-b"}, p.Candidates("sleep", 2), "at most limit, the first in order")
}

func TestCandidatesFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		workers []contracts.Announce
		kind    string
		wantIDs []string
	}{
		{"no workers is overflow", nil, "sleep", nil},
		{"full workers skipped", []contracts.Announce{
			{WorkerID: "a", Capacity: 2, InFlight: 2},
			{WorkerID: "b", Capacity: 2, InFlight: 1},
		}, "sleep", []string{"b"}},
		{"all full is overflow without requests", []contracts.Announce{
			{WorkerID: "a", Capacity: 1, InFlight: 1},
			{WorkerID: "b", Capacity: 1, InFlight: 1},
		}, "sleep", nil},
		{"unlimited capacity always a candidate", []contracts.Announce{
			{WorkerID: "a", Capacity: 0, InFlight: 500},
		}, "sleep", []string{"a"}},
		{"draining skipped", []contracts.Announce{
			{WorkerID: "a", Capacity: 1, Draining: true},
			{WorkerID: "b", Capacity: 1},
		}, "sleep", []string{"b"}},
		{"kind must match", []contracts.Announce{
			{WorkerID: "a", Capacity: 1, Kinds: []string{"exec"}},
			{WorkerID: "b", Capacity: 1, Kinds: []string{"exec", "sleep"}},
		}, "sleep", []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := setup(t, tc.workers...)
			require.Equal(t, tc.wantIDs, p.Candidates(tc.kind, 10))
		})
	}
}

func TestBusyReplyUpdatesLoad(t *testing.T) {
	t.Parallel()
	p, _ := setup(t,
		contracts.Announce{WorkerID: "a", Capacity: 2},
		contracts.Announce{WorkerID: "b", Capacity: 2},
	)
	p.Record("a", Busy, &contracts.OfferReply{Status: contracts.OfferBusy, InFlight: 2, Capacity: 2})
	require.Equal(t, []string{"b"}, p.Candidates("sleep", 10), "a busy worker is skipped until it frees a slot")

	p.Record("b", Accepted, &contracts.OfferReply{Status: contracts.OfferAccepted, InFlight: 1, Capacity: 2})
	require.Equal(t, []string{"b"}, p.Candidates("sleep", 10), "b still has one slot")
	p.Record("b", Accepted, &contracts.OfferReply{Status: contracts.OfferAccepted, InFlight: 2, Capacity: 2})
	require.Empty(t, p.Candidates("sleep", 10))
}

func TestEvictionAfterRepeatedFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		outcomes []Outcome
		evicted  bool
	}{
		{"two timeouts keep it", []Outcome{Timeout, Timeout}, false},
		{"three timeouts evict", []Outcome{Timeout, Timeout, Timeout}, true},
		{"mixed errors evict", []Outcome{Failed, NoResponders, Timeout}, true},
		{"offers never sent count nothing", []Outcome{NotSent, NotSent, NotSent, NotSent, NotSent}, false},
		{"a success resets the count", []Outcome{Timeout, Timeout, Busy, Timeout, Timeout}, false},
		{"refusal resets too", []Outcome{Timeout, Timeout, Refused, Timeout}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, r := setup(t, contracts.Announce{WorkerID: "a", Capacity: 4}, contracts.Announce{WorkerID: "b", Capacity: 4})
			for _, o := range tc.outcomes {
				var reply *contracts.OfferReply
				if o == Busy || o == Refused {
					reply = &contracts.OfferReply{InFlight: 1, Capacity: 4}
				}
				p.Record("a", o, reply)
			}
			ids := p.Candidates("sleep", 10)
			if tc.evicted {
				require.Equal(t, []string{"b"}, ids)
				// It comes back when it announces itself again.
				r.Observe(contracts.Announce{WorkerID: "a", Kinds: []string{"sleep"}, Capacity: 4, IntervalMS: 1000})
				require.Equal(t, []string{"a", "b"}, p.Candidates("sleep", 10))
				require.Zero(t, p.Failures("a"))
			} else {
				require.Equal(t, []string{"a", "b"}, ids)
			}
		})
	}
}

func TestOutcomeNames(t *testing.T) {
	t.Parallel()
	for o, want := range map[Outcome]string{Accepted: "accepted", Busy: "busy", Refused: "refused", NoResponders: "no_responders", Timeout: "timeout", Failed: "error", 0: "unknown"} {
		require.Equal(t, want, o.String())
	}
}

// TestRoomLessReservations: offers in flight take their slots out of the
// room of every kind the worker runs, until released.
func TestRoomLessReservations(t *testing.T) {
	t.Parallel()
	p, _ := setup(t,
		contracts.Announce{WorkerID: "a", Capacity: 2, Kinds: []string{"x", "y"}},
		contracts.Announce{WorkerID: "b", Capacity: 1, Kinds: []string{"x"}},
	)
	require.Equal(t, map[string]int{"x": 3, "y": 2}, p.Room())
	require.Equal(t, []string{"a"}, p.Slots("y", 1))
	require.Equal(t, map[string]int{"x": 2, "y": 1}, p.Room())
	require.Equal(t, []string{"a"}, p.Slots("y", 5), "a's one slot left")
	require.Empty(t, p.Slots("y", 1), "both of a's slots are reserved")
	require.Equal(t, map[string]int{"x": 1}, p.Room())
	require.Equal(t, []string{"b"}, p.Candidates("x", 10), "a's slots are all reserved")
	p.ReleaseN("a", 2)
	require.Equal(t, map[string]int{"x": 3, "y": 2}, p.Room())
	require.Equal(t, []string{"a", "b"}, p.Candidates("x", 10))
	p.ReleaseN("a", 5) // more than reserved changes nothing more
	require.Equal(t, map[string]int{"x": 3, "y": 2}, p.Room())
}

// TestSlotsInStableOrder: slots come worker by worker in id order, the
// first worker's free slots first, less those reserved; a worker whose
// last offer failed comes last with one slot, until it answers again.
func TestSlotsInStableOrder(t *testing.T) {
	t.Parallel()
	p, _ := setup(t,
		contracts.Announce{WorkerID: "c", Capacity: 2, Kinds: []string{"sleep"}},
		contracts.Announce{WorkerID: "a", Capacity: 2, Kinds: []string{"sleep"}},
		contracts.Announce{WorkerID: "b", Capacity: 3, Kinds: []string{"sleep"}},
	)
	require.Equal(t, []string{"a", "a", "b"}, p.Slots("sleep", 3))
	require.Equal(t, []string{"b", "b", "c"}, p.Slots("sleep", 3), "reserved slots are not given twice")
	p.ReleaseN("a", 2)
	p.ReleaseN("b", 3)
	p.ReleaseN("c", 1)

	p.Record("a", NoResponders, nil)
	require.Equal(t, []string{"b", "b", "b", "c", "c", "a"}, p.Slots("sleep", 10), "a failed: last, one slot")
	require.Empty(t, p.Slots("sleep", 10), "every slot reserved, a's probe too")
	p.ReleaseN("a", 1)
	require.Equal(t, []string{"a"}, p.Slots("sleep", 10), "one probe at a time")
	p.ReleaseN("a", 1)
	p.Record("a", Accepted, nil)
	require.Equal(t, []string{"a", "a"}, p.Slots("sleep", 10), "answered again: back in its place")
}

// TestUnreserveWakesNoOne: reservations a claim did not fill end without
// waking the dispatch loop (no room appeared, and a woken loop would claim
// again for nothing); reservations ended after an answer wake it.
func TestUnreserveWakesNoOne(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, contracts.Announce{WorkerID: "a", Capacity: 4, Kinds: []string{"x"}})
	require.Len(t, p.Slots("x", 4), 4)
	_, freed := p.Changed()
	p.Unreserve("a", 3)
	select {
	case <-freed:
		t.Fatal("Unreserve woke the dispatch loop")
	default:
	}
	require.Equal(t, map[string]int{"x": 3}, p.Room(), "the unfilled slots are free again")
	p.ReleaseN("a", 1)
	select {
	case <-freed:
	default:
		t.Fatal("ReleaseN did not wake the dispatch loop")
	}
}

// TestSlotsForShareAWorkerAcrossKinds: a worker that runs several kinds is
// listed for each with the same free slots, reserved once.
func TestSlotsForShareAWorkerAcrossKinds(t *testing.T) {
	t.Parallel()
	p, _ := setup(t,
		contracts.Announce{WorkerID: "a", Capacity: 1, Kinds: []string{"exec", "sleep"}},
		contracts.Announce{WorkerID: "b", Capacity: 2, Kinds: []string{"sleep"}},
	)
	r := p.SlotsFor(map[string]int{"exec": 5, "sleep": 5})
	lists, reserved := r.Lists, r.Reserved
	require.Equal(t, map[string][]string{"exec": {"a"}, "sleep": {"a", "b", "b"}}, lists)
	require.Equal(t, map[string]int{"a": 1, "b": 2}, reserved, "a's one slot reserved once for both kinds")
	require.Empty(t, p.Room(), "every slot reserved")
}
