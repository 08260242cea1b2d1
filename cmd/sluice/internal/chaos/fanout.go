package chaos

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Fan-outs beside plain jobs. fanoutShare of the submits are fan-outs of
// fanoutMinItems to fanoutMaxItems probe items, each with its own sleep,
// and a window of 1 to fanoutMaxWindow. From the probe workers' journals
// and the store the checker then finds:
//
//   - the most runs of one parent's children live at once: it must never
//     pass the parent's window (live as in overlap.go);
//   - parents whose counts do not match their children's states, or whose
//     children did not all end.

// Shape of the fan-out load.
const (
	fanoutShare     = 0.05
	fanoutMinItems  = 4
	fanoutMaxItems  = 12
	fanoutMaxWindow = 3
)

// fanoutReport is what checkFanouts found.
type fanoutReport struct {
	// Parents and Children count the fan-outs checked and their children.
	Parents, Children int
	// MaxLive is the most live runs of one parent's children at once, and
	// MaxWindow the window of that parent.
	MaxLive, MaxWindow int
	// OverWindow lists the parents whose children's runs passed the window.
	OverWindow []string
	// Miscounted lists parents whose counts or children are not right.
	Miscounted []string
}

// checkFanouts measures every admitted parent's window from the runs, and
// checks its counts against its children in the store.
func checkFanouts(ctx context.Context, st store.Store, parents []contracts.Job, runs []attemptRun) (fanoutReport, error) {
	var rep fanoutReport
	byParent := map[string][]window{}
	for _, r := range runs {
		p, ok := parentOf(r.JobID, parents)
		if !ok || !r.LiveEnd.After(r.Start) {
			continue
		}
		byParent[p] = append(byParent[p], window{from: r.Start, to: r.LiveEnd})
	}
	for _, p := range parents {
		rep.Parents++
		peak := maxOverlap(byParent[p.ID])
		if peak > rep.MaxLive || (peak == rep.MaxLive && p.Concurrency < rep.MaxWindow) {
			rep.MaxLive, rep.MaxWindow = peak, p.Concurrency
		}
		if peak > p.Concurrency {
			rep.OverWindow = append(rep.OverWindow, fmt.Sprintf("%s: %d live, window %d", p.ID, peak, p.Concurrency))
		}
		kids, err := listChildren(ctx, st, p.ID)
		if err != nil {
			return rep, err
		}
		rep.Children += len(kids)
		var got contracts.ChildCounts
		got.Total = len(kids)
		for _, c := range kids {
			if !c.State.Final() {
				got.Pending++
			}
			got.Add(c.State)
		}
		want := *p.Children
		want.Pending, want.Running = 0, 0
		if got != want || !p.State.Final() {
			rep.Miscounted = append(rep.Miscounted, fmt.Sprintf("%s (%s): counts %+v, children %+v", p.ID, p.State, want, got))
		}
	}
	sort.Strings(rep.OverWindow)
	return rep, nil
}

// parentOf finds the parent of a child id among parents.
func parentOf(id string, parents []contracts.Job) (string, bool) {
	for _, p := range parents {
		if len(id) > len(p.ID) && id[:len(p.ID)] == p.ID && id[len(p.ID)] == '-' {
			return p.ID, true
		}
	}
	return "", false
}

// listChildren reads every child of parent from the store.
func listChildren(ctx context.Context, st store.Store, parent string) ([]contracts.Job, error) {
	var all []contracts.Job
	q := store.Query{Parent: parent, Limit: 500}
	for {
		jobs, next, err := st.List(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("chaos: list the children of %s: %w", parent, err)
		}
		all = append(all, jobs...)
		if next == "" {
			return all, nil
		}
		q.Cursor = next
	}
}

// withRunningChildren replaces each fan-out parent among running jobs (it
// runs nothing itself) with its running children.
func withRunningChildren(ctx context.Context, st store.Store, running []contracts.Job) ([]contracts.Job, error) {
	out := running[:0:0]
	for _, j := range running {
		if !j.IsParent() {
			out = append(out, j)
			continue
		}
		kids, _, err := st.List(ctx, store.Query{Parent: j.ID, State: contracts.StateRunning, Limit: store.MaxListLimit})
		if err != nil {
			return nil, fmt.Errorf("chaos: sample the running children of %s: %w", j.ID, err)
		}
		out = append(out, kids...)
	}
	return out, nil
}
