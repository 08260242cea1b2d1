package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// storeSample is one look at the store.
type storeSample struct {
	Active       int            // pending + running, all tenants
	TenantActive map[string]int // pending + running by tenant
	PerWorker    int            // most run windows of one worker at once
	Total        int            // most run windows of all workers at once
	Detail       string         // set when a worker is over the limit
	// Rows holds the rows counted, for the check against the journals at
	// the end (see correctSample) when the sample passed a limit.
	Rows []contracts.Job
}

// sampleStore reads active jobs (globally and by tenant, from one count
// by tenant, so the numbers are one snapshot) and how many jobs each worker
// ran at once among the rows the store shows running.
//
// The store's "running" is an over-approximation of what a worker runs: a
// worker frees its slot when the handler returns, before the result reaches
// the store (seconds later while NATS is down), and the rows of a kill -9'd
// incarnation stay running until the reaper declares them stale. So the
// check is on run windows instead: a row counts only if it started during
// its worker id's current incarnation, and its window is
// [started_at, started_at + payload ms). The store records a job running
// before its handler starts, and the worker takes a new job only after a
// handler returned, so windows of jobs that ran one after the other on the
// same slot never overlap, while a worker that accepts past its limit makes
// limit+1 windows overlap. A handler can still stop before its window ends
// (its worker fenced it when heartbeats went unanswered, a cancel, a lost
// lease) and free its slot while the store shows it running: a sample over
// a limit keeps its rows and is measured again against the journals at the
// end (correctSample), and so is the total, against the sum of the limits
// of the workers alive at each instant (capacity.go).
func sampleStore(ctx context.Context, st store.Store, starts map[string]time.Time, limit int) (storeSample, error) {
	counts, err := st.Stats(ctx)
	if err != nil {
		return storeSample{}, fmt.Errorf("chaos: sample stats: %w", err)
	}
	s := storeSample{TenantActive: counts.TenantActive}
	for _, n := range counts.TenantActive {
		s.Active += n
	}
	byWorker := map[string][]contracts.Job{}
	var all []window
	cursor := ""
	for {
		jobs, next, err := st.List(ctx, store.Query{State: contracts.StateRunning, Limit: 500, Cursor: cursor})
		if err != nil {
			return storeSample{}, fmt.Errorf("chaos: sample running jobs: %w", err)
		}
		jobs, err = withRunningChildren(ctx, st, jobs)
		if err != nil {
			return storeSample{}, err
		}
		for _, j := range jobs {
			if j.StartedAt == nil || j.StartedAt.Before(starts[j.Worker]) {
				continue // not started, or an earlier incarnation's job, dead with it
			}
			byWorker[j.Worker] = append(byWorker[j.Worker], j)
			all = append(all, windowOf(j))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	s.Total = maxOverlap(all)
	for w, jobs := range byWorker {
		ws := make([]window, len(jobs))
		for i, j := range jobs {
			ws[i] = windowOf(j)
		}
		n := maxOverlap(ws)
		s.PerWorker = max(s.PerWorker, n)
		if n > limit {
			var b strings.Builder
			fmt.Fprintf(&b, "%s ran %d at once:", w, n)
			for _, j := range jobs {
				fmt.Fprintf(&b, " [%s attempt %d started %s payload %s]", j.ID, j.Claim, fmtTime(j.StartedAt), j.Payload)
			}
			s.Detail = b.String()
		}
	}
	for _, jobs := range byWorker {
		s.Rows = append(s.Rows, jobs...)
	}
	return s, nil
}

// correctSample measures a sample that passed a limit again with what the
// journals know: a row the store still showed running may belong to a
// handler that had already stopped (its worker fenced it on an
// unacknowledged lease, a cancel, a lost lease) and freed its slot, which
// the store learns only when the result or the reaper comes. Each window
// then ends at the run's live end (overlap.go), or is empty when no run of
// that attempt on that worker started. It returns the corrected most per
// worker and every corrected window.
func correctSample(running []contracts.Job, runs []attemptRun) (perWorker int, all []window) {
	type key struct {
		job     string
		attempt int64
		worker  string
	}
	live := map[key][]attemptRun{}
	for _, r := range runs {
		k := key{r.JobID, r.Attempt, r.Worker}
		live[k] = append(live[k], r)
	}
	byWorker := map[string][]window{}
	for _, j := range running {
		w := windowOf(j)
		end := w.from
		for _, r := range live[key{j.ID, j.Claim, j.Worker}] {
			if !r.LiveEnd.Before(w.from) {
				end = maxTime(end, minTime(w.to, r.LiveEnd))
			}
		}
		w.to = end
		if !w.to.After(w.from) {
			continue
		}
		byWorker[j.Worker] = append(byWorker[j.Worker], w)
		all = append(all, w)
	}
	for _, ws := range byWorker {
		perWorker = max(perWorker, maxOverlap(ws))
	}
	return perWorker, all
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// window is the span a job's handler ran at least.
type window struct{ from, to time.Time }

func windowOf(j contracts.Job) window {
	var p struct {
		MS int64 `json:"ms"`
	}
	_ = json.Unmarshal(j.Payload, &p)
	return window{from: *j.StartedAt, to: j.StartedAt.Add(time.Duration(p.MS) * time.Millisecond)}
}

// maxOverlap is the largest number of half-open windows covering one instant.
func maxOverlap(ws []window) int {
	n, _ := peak(ws)
	return n
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("15:04:05.000")
}
