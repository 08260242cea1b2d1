package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// resourceWorker announces a fake worker of capacity slots and cpu cores
// that accepts what it is offered.
func (b *bundle) resourceWorker(id string, slots int, cpu float64) {
	b.t.Helper()
	b.worker(id, slots, contracts.OfferAccepted)
	c := contracts.Resources{CPU: cpu, Memory: 8 << 30}
	b.roster.Observe(contracts.Announce{WorkerID: id, Kinds: []string{"sleep"}, Capacity: slots, IntervalMS: 60000,
		Resources: &c, FreeResources: &c})
}

// cpuJob admits a job of kind sleep that declares cpu cores.
func (b *bundle) cpuJob(cpu float64) contracts.Job {
	b.t.Helper()
	return b.admitWith(time.Minute, func(j *contracts.Job) { j.Resources = &contracts.Resources{CPU: cpu} })
}

// end finishes a running job.
func (b *bundle) end(j contracts.Job) {
	b.t.Helper()
	cur := b.get(j.ID)
	_, err := b.store.Transition(context.Background(), store.Expect{ID: cur.ID, State: cur.State, Claim: cur.Claim},
		store.Change{Now: b.now(), State: contracts.StateSucceeded})
	require.NoError(b.t, err)
}

// TestDispatchPacksByResources: each job goes to the first worker in id
// order whose free cores fit it, so a 2-core worker runs two 1-core jobs
// or one 2-core job, never a 2-core job beside a 1-core one, and load
// still gathers on the first worker.
func TestDispatchPacksByResources(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.resourceWorker("w1", 4, 2)
	b.resourceWorker("w2", 4, 2)
	one := b.cpuJob(1)
	two := b.cpuJob(2)
	three := b.cpuJob(1)
	require.Len(t, b.round(), 3)
	require.Equal(t, "w1", b.get(one.ID).Worker)
	require.Equal(t, "w2", b.get(two.ID).Worker, "no room for 2 cores beside 1 on w1")
	require.Equal(t, "w1", b.get(three.ID).Worker, "first fit: w1 still had a core")
	four := b.cpuJob(1)
	require.Empty(t, b.round(), "every core is taken, though slots are free")
	require.Equal(t, contracts.StatePending, b.get(four.ID).State)
	b.end(one)
	require.Len(t, b.round(), 1)
	require.Equal(t, "w1", b.get(four.ID).Worker)
}

// TestDispatchDoesNotStarveABigJob: a 2-core job that fits nowhere now
// holds the first worker that could run it; the 1-core jobs of the same
// priority behind it do not take that worker's cores as they free up, so
// it runs there once the job running there ends.
func TestDispatchDoesNotStarveABigJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.resourceWorker("w1", 4, 2)
	first := b.cpuJob(1)
	require.Len(t, b.round(), 1)
	big := b.cpuJob(2)
	var small []contracts.Job
	for range 3 {
		small = append(small, b.cpuJob(1))
	}
	require.Empty(t, b.round(), "the big job waits, and holds w1: the small ones behind it do not take its free core")
	for _, j := range small {
		require.Equal(t, contracts.StatePending, b.get(j.ID).State)
	}
	b.end(first)
	got := b.round()
	require.Len(t, got, 1)
	require.Equal(t, big.ID, got[0].ID, "the big job, first in order, fits now")
	require.Equal(t, "w1", b.get(big.ID).Worker)
	b.end(big)
	require.Len(t, b.round(), 2, "then the small ones, two at a time")
}
