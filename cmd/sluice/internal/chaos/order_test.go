package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestCheckOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	job := func(id, key string, prio, createdMS int) contracts.Job {
		j := contracts.Job{ID: id, Tenant: "acme", Kind: probeKind, Priority: prio, CreatedAt: at(createdMS)}
		if key != "" {
			j.ConcurrencyKey, j.ConcurrencyLimit = key, 2
		}
		return j
	}
	run := func(id string, from, to int) attemptRun {
		return attemptRun{JobID: id, Attempt: 1, Start: at(from), LiveEnd: at(to), End: at(to)}
	}
	jobs := map[string]contracts.Job{
		"k1": job("k1", "db", 1, 0), "k2": job("k2", "db", 1, 0), "k3": job("k3", "db", 1, 0),
		"low": job("low", "", 1, 0), "high": job("high", "", 9, 0),
	}

	// Two keyed runs at once, the third after one ended (touching ends).
	rep := checkOrder([]attemptRun{run("k1", 1000, 2000), run("k2", 1500, 2500), run("k3", 2000, 3000)}, jobs)
	require.Equal(t, 2, rep.MaxPerKey)
	require.Empty(t, rep.KeyOverLimit)

	// Three at once: over the limit.
	rep = checkOrder([]attemptRun{run("k1", 1000, 2000), run("k2", 1500, 2500), run("k3", 1900, 3000)}, jobs)
	require.Equal(t, 3, rep.MaxPerKey)
	require.Equal(t, []string{"acme/db: 3 live, limit 2"}, rep.KeyOverLimit)

	// The low-priority job started while the high one, admitted long
	// before, still waited: one inversion. The other way round: none.
	rep = checkOrder([]attemptRun{run("low", 1000, 1100), run("high", 1200, 1300)}, jobs)
	require.Equal(t, 1, rep.Inversions)
	require.Equal(t, 2, rep.FirstRuns)
	rep = checkOrder([]attemptRun{run("high", 1000, 1100), run("low", 1200, 1300)}, jobs)
	require.Zero(t, rep.Inversions)
	// Admitted within the slack of the other's start: not yet waiting.
	jobs["high"] = job("high", "", 9, 900)
	rep = checkOrder([]attemptRun{run("low", 1000, 1100), run("high", 1200, 1300)}, jobs)
	require.Zero(t, rep.Inversions)
}

// TestCorrectSample: a row the store still shows running whose handler
// the worker had fenced early does not count past the run's live end.
func TestCorrectSample(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0).UTC()
	at := func(ms int) *time.Time { v := t0.Add(time.Duration(ms) * time.Millisecond); return &v }
	job := func(id string, attempt int64, startMS, ms int) contracts.Job {
		return contracts.Job{ID: id, Claim: attempt, Worker: "w1", State: contracts.StateRunning,
			StartedAt: at(startMS), Payload: []byte(fmt.Sprintf(`{"ms":%d}`, ms))}
	}
	running := []contracts.Job{job("long", 3, 0, 2000), job("a", 1, 1000, 300), job("b", 1, 1100, 300)}
	run := func(id string, attempt int64, from, liveEnd int) attemptRun {
		return attemptRun{JobID: id, Attempt: attempt, Worker: "w1", Start: *at(from), LiveEnd: *at(liveEnd)}
	}
	// The long job's worker fenced it at 900 ms: two at once, not three.
	perWorker, ws := correctSample(running, []attemptRun{run("long", 3, 0, 900), run("a", 1, 1000, 1300), run("b", 1, 1100, 1400)})
	require.Equal(t, 2, perWorker)
	require.Equal(t, 2, maxOverlap(ws))
	// Had it run on, three at once.
	perWorker, _ = correctSample(running, []attemptRun{run("long", 3, 0, 2000), run("a", 1, 1000, 1300), run("b", 1, 1100, 1400)})
	require.Equal(t, 3, perWorker)
	// A row whose handler never started counts for nothing.
	perWorker, _ = correctSample(running, []attemptRun{run("a", 1, 1000, 1300), run("b", 1, 1100, 1400)})
	require.Equal(t, 2, perWorker)
}
