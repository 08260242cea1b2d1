package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Ordered dispatch, as measured here.
//
// The load gives some jobs a concurrency key (keyShare of them, over
// chaosKeys keys per tenant, each with limit keyLimit) and every job a
// random priority. From the probe workers' journals and the jobs in the
// store the checker then counts:
//
//   - the most runs of one tenant's key live at once (live as in
//     overlap.go: a run ends at its return, its fence, or its process's
//     death or long freeze): it must never pass the key's limit;
//   - priority inversions: a job's first run started while a job of
//     higher priority, admitted at least inversionSlack earlier, had not
//     started yet. Faults (a requeue after a kill, an offer that failed
//     and waits the retry interval) make some of these legitimate, so
//     they are counted and reported, not failed.

// Shape of the keyed load.
const (
	keyShare       = 0.25
	chaosKeys      = 3
	keyLimit       = 2
	inversionSlack = 250 * time.Millisecond
)

// jobShape is what the load asks of one job beyond its sleep.
type jobShape struct {
	Priority         int
	ConcurrencyKey   string
	ConcurrencyLimit int
	// Items > 0 makes the job a fan-out of that many probe items with
	// window Window (see fanout.go).
	Items, Window int
	// StallTimeout is the job's stall_timeout ("" = none); Stall makes the
	// probe report no progress, so it must be stopped (see stall.go).
	StallTimeout string
	Stall        bool
	// Resources is the job's declaration ("": none; see capacity.go).
	Resources string
}

// randomShape draws a job's priority and, for keyShare of the jobs, its key.
func randomShape(rng *lockedRand) jobShape {
	s := jobShape{Priority: rng.intN(contracts.MaxPriority + 1)}
	if rng.float() < keyShare {
		s.ConcurrencyKey = fmt.Sprintf("key-%d", rng.intN(chaosKeys))
		s.ConcurrencyLimit = keyLimit
	}
	switch r := rng.float(); {
	case r < stallShare:
		s.Stall, s.StallTimeout = true, stallTimeout.String()
	case r < stallShare+watchedShare:
		s.StallTimeout = watchedTimeout.String()
	}
	if rng.float() < resourceShare {
		s.Resources = chaosResources[rng.intN(len(chaosResources))]
	}
	if rng.float() < fanoutShare {
		s.Items = fanoutMinItems + rng.intN(fanoutMaxItems-fanoutMinItems+1)
		s.Window = 1 + rng.intN(fanoutMaxWindow)
	}
	return s
}

// orderReport is what checkOrder found.
type orderReport struct {
	// MaxPerKey is the most live runs of one tenant's key at once; KeyOverLimit
	// lists the keys whose runs went past their limit.
	MaxPerKey    int
	KeyOverLimit []string
	// Inversions counts first runs that started ahead of a waiting job of
	// higher priority; FirstRuns is how many first runs were looked at.
	Inversions, FirstRuns int
}

// checkOrder measures key limits and priority order from the runs and
// the jobs they belong to.
func checkOrder(runs []attemptRun, jobs map[string]contracts.Job) orderReport {
	var rep orderReport
	byKey := map[[2]string][]window{}
	limit := map[[2]string]int{}
	first := map[string]time.Time{}
	for _, r := range runs {
		j, ok := jobs[r.JobID]
		if !ok {
			continue
		}
		if t, seen := first[r.JobID]; !seen || r.Start.Before(t) {
			first[r.JobID] = r.Start
		}
		if j.ConcurrencyKey == "" || !r.LiveEnd.After(r.Start) {
			continue
		}
		k := [2]string{j.Tenant, j.ConcurrencyKey}
		byKey[k] = append(byKey[k], window{from: r.Start, to: r.LiveEnd})
		limit[k] = j.ConcurrencyLimit
	}
	for k, ws := range byKey {
		peak := maxOverlap(ws)
		rep.MaxPerKey = max(rep.MaxPerKey, peak)
		if peak > limit[k] {
			rep.KeyOverLimit = append(rep.KeyOverLimit, fmt.Sprintf("%s/%s: %d live, limit %d", k[0], k[1], peak, limit[k]))
		}
	}
	sort.Strings(rep.KeyOverLimit)

	type started struct {
		job   contracts.Job
		first time.Time
	}
	var all []started
	for id, t := range first {
		all = append(all, started{jobs[id], t})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].first.Before(all[j].first) })
	rep.FirstRuns = len(all)
	for i, s := range all {
		// A later starter of higher priority that was already waiting.
		for _, w := range all[i+1:] {
			// A child waits for its window, not for its priority.
			if w.job.Priority > s.job.Priority && w.job.Kind == s.job.Kind && w.job.Parent == "" &&
				w.job.CreatedAt.Before(s.first.Add(-inversionSlack)) && w.job.ConcurrencyKey == "" && w.job.RunAt == nil {
				rep.Inversions++
				break
			}
		}
	}
	return rep
}
