package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Overlapping attempts, as measured here.
//
// The probe workers journal every handler run: its start, the moment its
// context ended (if it did: the worker fenced the attempt itself, was told
// the lease was lost, a cancel request, shutdown) and its end. A worker may
// act for an attempt only while it holds the lease, so a run counts as
// live from its start until the earliest of:
//
//   - its end (the handler returned),
//   - the moment its context ended (from then on the worker treats the
//     attempt as fenced and reports nothing for it),
//   - the death of its process (kill -9), and
//   - the moment its process was frozen with SIGSTOP, when that freeze
//     outlasted the worker's self-fencing delay (2/3 of the stale
//     threshold): a stopped process does nothing, and by the time it runs
//     again its lease has expired by the worker's own rule. The wall-clock
//     span of such a run goes on over the freeze and up to the fence or
//     the handler's return after SIGCONT, but nothing in that span acts
//     under the lease; what it does after SIGCONT is counted apart
//     (resumed runs, and the tail from SIGCONT to the fence or return,
//     with whether a newer attempt was live during that tail). A resumed
//     run that still returned unfenced is a violation: the handler's
//     context reads the lease against the clock, so a run frozen past its
//     lease sees it ended before it can act again.
//
// A freeze shorter than the self-fencing delay does not cut the run: the
// lease is still valid when the process resumes. A run that starts after
// a freeze counts in full, even if its lease was granted before the
// freeze.
//
// Two runs of the same job overlap when they are different attempts, or
// the same attempt in two processes, and their live intervals share a
// positive length of time. Guarantee 5 says that never happens.

// procLife is what the checker knows about one worker process (pid): the
// worker id, when it died (zero while alive) and when it was frozen.
type procLife struct {
	Worker  string
	End     time.Time
	Freezes []Span
}

// attemptRun is one handler run of one attempt in one process.
type attemptRun struct {
	JobID   string
	Attempt int64
	Worker  string
	PID     int
	Start   time.Time
	End     time.Time // zero: it never returned (its process died)
	CtxDone time.Time // zero: its context never ended while it ran
	CtxErr  string
	// LiveEnd closes the live interval [Start, LiveEnd).
	LiveEnd time.Time
	// Resumed: a freeze longer than the self-fencing delay began during
	// the run; Unfenced: after that freeze it still returned normally,
	// before the worker fenced it.
	Resumed, Unfenced bool
	// Tail is [SIGCONT, the fence or the return) of a resumed run: wall
	// time in which its handler ran again without a valid lease.
	Tail window
	// Until closes the run's wall-clock span [Start, Until): its end, else
	// its process's death, else now. The worker holds the run's resources
	// (and its slot) at least that long.
	Until time.Time
	// Need and Capacity are what the run takes of its worker and the
	// worker's capacity, from the start line (nil in a journal without).
	Need, Capacity *contracts.Resources
}

// overlap is two runs of one job live at once.
type overlap struct {
	A, B attemptRun
	For  time.Duration
}

// String describes the overlap for a report.
func (o overlap) String() string {
	return fmt.Sprintf("job %s: attempt %d on %s (pid %d, live %s–%s) and attempt %d on %s (pid %d, live %s–%s) overlap %s",
		o.A.JobID, o.A.Attempt, o.A.Worker, o.A.PID, clock(o.A.Start), clock(o.A.LiveEnd),
		o.B.Attempt, o.B.Worker, o.B.PID, clock(o.B.Start), clock(o.B.LiveEnd), o.For)
}

// journalReport is what the journals say.
type journalReport struct {
	Runs         []attemptRun
	Overlaps     []overlap
	MaxPerWorker int // most runs one process had going at once (wall clock)
	Resumed      int
	Unfenced     int
	MaxTail      time.Duration // longest tail of a resumed run
	TailOverlaps int           // tails during which another attempt of the job was live
	Unpaired     int           // ctx_done or end lines without a start
}

// analyzeJournal pairs journal entries into runs, computes each run's live
// interval (see the comment at the top of this file) and finds overlaps.
// procs maps every worker pid to its life; now closes runs of live
// processes that never ended.
func analyzeJournal(entries []journal.Entry, procs map[int]procLife, fenceAfter time.Duration, now time.Time) journalReport {
	sort.SliceStable(entries, func(i, k int) bool { return entries[i].T < entries[k].T })
	type key struct {
		job     string
		attempt int64
		pid     int
	}
	var rep journalReport
	latest := map[key]int{} // index in rep.Runs of the key's latest run
	for _, e := range entries {
		k := key{e.JobID, e.Attempt, e.PID}
		at := time.Unix(0, e.T)
		if e.Event == journal.EventStart {
			latest[k] = len(rep.Runs)
			rep.Runs = append(rep.Runs, attemptRun{JobID: e.JobID, Attempt: e.Attempt, Worker: e.WorkerID, PID: e.PID, Start: at,
				Need: e.Need, Capacity: e.Capacity})
			continue
		}
		i, ok := latest[k]
		if !ok {
			rep.Unpaired++
			continue
		}
		r := &rep.Runs[i]
		switch {
		case e.Event == journal.EventCtxDone && r.CtxDone.IsZero():
			r.CtxDone = at
			if r.CtxErr == "" {
				r.CtxErr = e.CtxErr
			}
		case e.Event == journal.EventEnd && r.End.IsZero():
			r.End = at
			if r.CtxErr == "" {
				r.CtxErr = e.CtxErr
			}
		default:
			rep.Unpaired++
		}
	}

	byPID := map[int][]window{}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		life := procs[r.PID]
		end := r.End
		if end.IsZero() {
			end = life.End
			if end.IsZero() {
				end = now
			}
		}
		byPID[r.PID] = append(byPID[r.PID], window{from: r.Start, to: end})
		r.Until, r.LiveEnd = end, end
		if !r.CtxDone.IsZero() && r.CtxDone.Before(r.LiveEnd) {
			r.LiveEnd = r.CtxDone
		}
		stopped := r.LiveEnd // return, fence or death, whatever came first
		for _, f := range life.Freezes {
			if f.To.Sub(f.From) <= fenceAfter || f.From.Before(r.Start) || !f.From.Before(r.LiveEnd) {
				continue
			}
			r.LiveEnd = f.From
			r.Resumed = true
			r.Tail = window{from: f.To, to: stopped}
			if !r.End.IsZero() && r.End.After(f.To) && r.CtxErr == "" {
				r.Unfenced = true
			}
		}
		if r.Resumed {
			rep.Resumed++
			rep.MaxTail = max(rep.MaxTail, r.Tail.to.Sub(r.Tail.from))
		}
		if r.Unfenced {
			rep.Unfenced++
		}
	}
	for _, ws := range byPID {
		rep.MaxPerWorker = max(rep.MaxPerWorker, maxOverlap(ws))
	}

	byJob := map[string][]attemptRun{}
	for _, r := range rep.Runs {
		byJob[r.JobID] = append(byJob[r.JobID], r)
	}
	for _, runs := range byJob {
		for _, r := range runs {
			if !r.Resumed || !r.Tail.to.After(r.Tail.from) {
				continue
			}
			for _, o := range runs {
				if (o.Attempt != r.Attempt || o.PID != r.PID) && o.Start.Before(r.Tail.to) && o.LiveEnd.After(r.Tail.from) {
					rep.TailOverlaps++
					break
				}
			}
		}
		for i := range runs {
			for k := i + 1; k < len(runs); k++ {
				a, b := runs[i], runs[k]
				if a.Attempt == b.Attempt && a.PID == b.PID {
					continue
				}
				from := a.Start
				if b.Start.After(from) {
					from = b.Start
				}
				to := a.LiveEnd
				if b.LiveEnd.Before(to) {
					to = b.LiveEnd
				}
				if to.After(from) {
					if b.Start.Before(a.Start) {
						a, b = b, a
					}
					rep.Overlaps = append(rep.Overlaps, overlap{A: a, B: b, For: to.Sub(from)})
				}
			}
		}
	}
	sort.Slice(rep.Overlaps, func(i, k int) bool { return rep.Overlaps[i].A.Start.Before(rep.Overlaps[k].A.Start) })
	return rep
}

// clock formats a time of day to the millisecond; "-" for zero.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}
