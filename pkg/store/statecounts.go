package store

import (
	"maps"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Counts of jobs by state. Every driver keeps, per tenant, how many of its
// jobs (fan-out children included) are in each state, changed in the same
// atomic step as the write that creates, moves or deletes a job, so that
// Stats and TenantCounts read a few counters instead of counting the jobs.
// What one write does to them is StateDelta; Reconcile compares them with a
// full count through StateCountDrift.

// StateDelta is one change of a counter of jobs by state: N more (or, when
// negative, fewer) jobs of Tenant in State.
type StateDelta struct {
	Tenant string
	State  contracts.JobState
	N      int
}

// StateDeltas returns what a write of n jobs of tenant does to the
// counters of jobs by state: from "" is an insert (admission, fan-out
// children), to "" a delete (purge, children of an admission undone), and
// both set a move from one state to another (nothing when they are the
// same). Deltas are in the order from, to.
func StateDeltas(tenant string, from, to contracts.JobState, n int) []StateDelta {
	if from == to || n == 0 {
		return nil
	}
	out := make([]StateDelta, 0, 2)
	if from != "" {
		out = append(out, StateDelta{Tenant: tenant, State: from, N: -n})
	}
	if to != "" {
		out = append(out, StateDelta{Tenant: tenant, State: to, N: n})
	}
	return out
}

// StateCheckEvery is how often Reconcile compares the counters of jobs by
// state with a full count of the jobs (the first Reconcile after a store
// opens always does). The drivers keep the counters in step with every
// write, so the check only guards against what a driver cannot make
// atomic or changes behind its back; a full count is O(jobs), which the
// reaper's sweep every few seconds must not pay.
const StateCheckEvery = 10 * time.Minute

// StateCounts are counters of jobs by tenant and state.
type StateCounts map[string]map[contracts.JobState]int

// Apply adds deltas to c, dropping counters that reach zero.
func (c StateCounts) Apply(deltas ...StateDelta) {
	for _, d := range deltas {
		byState := c[d.Tenant]
		if byState == nil {
			byState = map[contracts.JobState]int{}
			c[d.Tenant] = byState
		}
		byState[d.State] += d.N
		if byState[d.State] == 0 {
			delete(byState, d.State)
		}
		if len(byState) == 0 {
			delete(c, d.Tenant)
		}
	}
}

// ByState sums c over tenants: every state present, zeros included.
func (c StateCounts) ByState() map[contracts.JobState]int {
	out := ZeroStates()
	for _, byState := range c {
		for st, n := range byState {
			out[st] += n
		}
	}
	return out
}

// Tenant is tenant's counters: every state present, zeros included.
func (c StateCounts) Tenant(tenant string) map[contracts.JobState]int {
	out := ZeroStates()
	maps.Copy(out, c[tenant])
	return out
}

// ZeroStates is a count of every state at zero.
func ZeroStates() map[contracts.JobState]int {
	out := make(map[contracts.JobState]int, len(contracts.AllStates))
	for _, st := range contracts.AllStates {
		out[st] = 0
	}
	return out
}

// StateCountDrift is how far the stored counters are from the actual count
// of the jobs: the sum over every tenant and state of the absolute
// difference (zero when exact).
func StateCountDrift(stored, actual StateCounts) int {
	drift := 0
	for tenant, byState := range stored {
		for st, n := range byState {
			drift += absDiff(n, actual[tenant][st])
		}
	}
	for tenant, byState := range actual {
		for st, n := range byState {
			if _, ok := stored[tenant][st]; !ok {
				drift += absDiff(n, 0)
			}
		}
	}
	return drift
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}
