package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
)

var base = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ms is base plus n milliseconds.
func ms(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

// ev is one journal entry at ms(at).
func ev(job string, attempt int64, pid int, event string, at int, ctxErr string) journal.Entry {
	return journal.Entry{JobID: job, Attempt: attempt, WorkerID: "w", PID: pid, Event: event, T: ms(at).UnixNano(), CtxErr: ctxErr}
}

const fence = 1333 * time.Millisecond // 2/3 of a 2s stale threshold

func TestAnalyzeJournal(t *testing.T) {
	t.Parallel()
	now := ms(100_000)
	tests := []struct {
		name     string
		entries  []journal.Entry
		procs    map[int]procLife
		overlaps int
		resumed  int
		unfenced int
		tails    int // resumed runs whose tail met a newer attempt
		perPID   int
	}{
		{
			name: "attempts one after the other",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventEnd, 100, ""),
				ev("j", 2, 20, journal.EventStart, 100, ""), ev("j", 2, 20, journal.EventEnd, 200, ""),
			},
			perPID: 1,
		},
		{
			name: "two attempts at once",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventEnd, 300, ""),
				ev("j", 2, 20, journal.EventStart, 200, ""), ev("j", 2, 20, journal.EventEnd, 400, ""),
			},
			overlaps: 1, perPID: 1,
		},
		{
			name: "one attempt in two processes",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventEnd, 300, ""),
				ev("j", 1, 20, journal.EventStart, 100, ""), ev("j", 1, 20, journal.EventEnd, 150, ""),
			},
			overlaps: 1, perPID: 1,
		},
		{
			name: "a fenced run is live until its context ended",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventCtxDone, 100, "lease lost"),
				ev("j", 2, 20, journal.EventStart, 100, ""),
				ev("j", 1, 10, journal.EventEnd, 150, "lease lost"), ev("j", 2, 20, journal.EventEnd, 300, ""),
			},
			perPID: 1,
		},
		{
			name: "a context that ended after the handler returned changes nothing",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventEnd, 100, ""),
				ev("j", 1, 10, journal.EventCtxDone, 101, "worker shutting down"),
				ev("j", 2, 20, journal.EventStart, 100, ""), ev("j", 2, 20, journal.EventEnd, 200, ""),
			},
			perPID: 1,
		},
		{
			name: "a killed process's run ends with it",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""),
				ev("j", 2, 20, journal.EventStart, 500, ""), ev("j", 2, 20, journal.EventEnd, 600, ""),
			},
			procs:  map[int]procLife{10: {End: ms(400)}},
			perPID: 1,
		},
		{
			name: "a run of a live process that never ended goes on",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""),
				ev("j", 2, 20, journal.EventStart, 500, ""), ev("j", 2, 20, journal.EventEnd, 600, ""),
			},
			overlaps: 1, perPID: 1,
		},
		{
			name: "frozen past the fence: live until the freeze, the unfenced return after SIGCONT counted apart",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""),
				ev("j", 2, 20, journal.EventStart, 3000, ""), ev("j", 2, 20, journal.EventEnd, 6000, ""),
				ev("j", 1, 10, journal.EventEnd, 5001, ""),
			},
			procs:   map[int]procLife{10: {Freezes: []Span{{From: ms(200), To: ms(5000)}}}},
			resumed: 1, unfenced: 1, tails: 1, perPID: 1,
		},
		{
			name: "frozen past the fence, fenced after SIGCONT",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""),
				ev("j", 2, 20, journal.EventStart, 3000, ""), ev("j", 2, 20, journal.EventEnd, 6000, ""),
				ev("j", 1, 10, journal.EventCtxDone, 5001, "lease not acknowledged in time"),
				ev("j", 1, 10, journal.EventEnd, 5001, "lease not acknowledged in time"),
			},
			procs:   map[int]procLife{10: {Freezes: []Span{{From: ms(200), To: ms(5000)}}}},
			resumed: 1, tails: 1, perPID: 1,
		},
		{
			name: "frozen past the fence, the newer attempt over before SIGCONT",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""),
				ev("j", 2, 20, journal.EventStart, 3000, ""), ev("j", 2, 20, journal.EventEnd, 4000, ""),
				ev("j", 1, 10, journal.EventEnd, 5001, ""),
			},
			procs:   map[int]procLife{10: {Freezes: []Span{{From: ms(200), To: ms(5000)}}}},
			resumed: 1, unfenced: 1, perPID: 1,
		},
		{
			name: "a freeze shorter than the fence does not cut the run",
			entries: []journal.Entry{
				ev("j", 1, 10, journal.EventStart, 0, ""), ev("j", 1, 10, journal.EventEnd, 1500, ""),
				ev("j", 2, 20, journal.EventStart, 1200, ""), ev("j", 2, 20, journal.EventEnd, 1600, ""),
			},
			procs:    map[int]procLife{10: {Freezes: []Span{{From: ms(200), To: ms(1000)}}}},
			overlaps: 1, perPID: 1,
		},
		{
			name: "a run that starts after a freeze counts in full",
			entries: []journal.Entry{
				ev("j", 2, 20, journal.EventStart, 3000, ""), ev("j", 2, 20, journal.EventEnd, 6000, ""),
				ev("j", 1, 10, journal.EventStart, 5001, ""), ev("j", 1, 10, journal.EventEnd, 5003, ""),
			},
			procs:    map[int]procLife{10: {Freezes: []Span{{From: ms(200), To: ms(5000)}}}},
			overlaps: 1, perPID: 1,
		},
		{
			name: "two slots of one process",
			entries: []journal.Entry{
				ev("a", 1, 10, journal.EventStart, 0, ""), ev("b", 1, 10, journal.EventStart, 10, ""),
				ev("a", 1, 10, journal.EventEnd, 100, ""), ev("b", 1, 10, journal.EventEnd, 100, ""),
				ev("c", 1, 10, journal.EventStart, 100, ""), ev("c", 1, 10, journal.EventEnd, 200, ""),
			},
			perPID: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := analyzeJournal(tc.entries, tc.procs, fence, now)
			require.Len(t, rep.Overlaps, tc.overlaps, "%v", rep.Overlaps)
			require.Equal(t, tc.resumed, rep.Resumed, "resumed")
			require.Equal(t, tc.unfenced, rep.Unfenced, "unfenced")
			require.Equal(t, tc.tails, rep.TailOverlaps, "tails")
			require.Equal(t, tc.perPID, rep.MaxPerWorker, "per process")
			require.Zero(t, rep.Unpaired)
		})
	}
}

func TestAnalyzeJournalUnpaired(t *testing.T) {
	t.Parallel()
	rep := analyzeJournal([]journal.Entry{ev("j", 1, 10, journal.EventEnd, 5, "")}, nil, fence, ms(10))
	require.Equal(t, 1, rep.Unpaired)
	require.Empty(t, rep.Runs)
}
