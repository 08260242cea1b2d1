package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestCheckTotalAgainstTheWorkersAlive is the case of a chaos run under
// CPU load: spawned worker s1 is frozen past the roster's expiry, the three
// schedulers each ask for a replacement (s2, s3, s4), s1 resumes, and the
// four fixed and four spawned workers run two jobs each: 16 jobs running,
// which a fixed bound of 2 × (4 + 3) = 14 reported as a broken guarantee
// while every worker kept to its limit. Against the workers alive at each
// instant it holds, and the spawned workers the schedulers could count
// stay within their bound; a job more than the slots alive and runs past
// a worker's death are still caught, and a fourth spawned worker is
// counted.
func TestCheckTotalAgainstTheWorkersAlive(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const limit = 2
	fixed := func(i int) workerLife {
		return workerLife{Worker: fmt.Sprintf("chaos-w%d", i), PID: 100 + i, Start: at(0)}
	}
	spawned := func(i, startMS int) workerLife {
		return workerLife{Worker: fmt.Sprintf("chaos-s%d", i), PID: 200 + i, Spawned: true, Start: at(startMS)}
	}
	base := func() []workerLife {
		s1 := spawned(1, 1000)
		s1.Forgotten = at(2000) // frozen 2000–6000 ms
		return []workerLife{fixed(1), fixed(2), fixed(3), fixed(4), s1, spawned(2, 3000), spawned(3, 3100), spawned(4, 3200)}
	}
	// Two jobs on each of the eight workers from 7000 to 8000 ms.
	busy := func(workers int) []window {
		var ws []window
		for range 2 * workers {
			ws = append(ws, window{from: at(7000), to: at(8000)})
		}
		return ws
	}

	tests := []struct {
		name        string
		lives       func() []workerLife
		windows     []window
		running     int
		over        string // the violation, "" when none
		spawnedLive int
	}{
		{
			name: "a frozen spawned worker and its replacements, each within its limit", lives: base, windows: busy(8),
			running: 16, spawnedLive: 3,
		},
		{
			name: "one job more than the slots of the workers alive", lives: base, windows: append(busy(8), window{from: at(7500), to: at(7600)}),
			running: 17, over: "17 jobs running at " + clock(at(7500)) + ", sum of the limits of the 8 workers alive then 16", spawnedLive: 3,
		},
		{
			name: "runs going on after their worker died",
			lives: func() []workerLife {
				ls := base()
				ls[3].End = at(7200) // chaos-w4 killed
				return ls
			},
			windows: busy(8), running: 16, over: "16 jobs running at " + clock(at(7200)) + ", sum of the limits of the 7 workers alive then 14", spawnedLive: 3,
		},
		{
			name: "a fourth spawned worker the schedulers could count",
			lives: func() []workerLife {
				ls := base()
				ls[4].Forgotten = time.Time{} // s1 never frozen
				return ls
			},
			windows: busy(8), running: 16, spawnedLive: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lives := tt.lives()
			tc := checkTotal(tt.windows, lives, limit)
			require.Equal(t, tt.running, tc.Running)
			if tt.over == "" {
				require.Nil(t, tc.Over, "no instant over the sum of the limits")
			} else {
				require.NotNil(t, tc.Over)
				require.Equal(t, tt.over, tc.Over.String())
			}
			n, _ := maxSpawnedCounted(lives)
			require.Equal(t, tt.spawnedLive, n)
		})
	}
}

// TestTotalCheckMergeKeepsTheWorstInstant checks that samples combine to
// the most running and the largest excess.
func TestTotalCheckMergeKeepsTheWorstInstant(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	a := totalCheck{Running: 10, Limit: 16, Workers: 8, At: t0}
	b := totalCheck{Running: 9, Limit: 8, Workers: 4, At: t0.Add(time.Second)}
	b.Over = &totalCheck{Running: 9, Limit: 8, Workers: 4, At: b.At}
	m := a.merge(b)
	require.Equal(t, 10, m.Running)
	require.Equal(t, 16, m.Limit)
	require.NotNil(t, m.Over)
	require.Equal(t, 9, m.Over.Running)
	require.Equal(t, m, m.merge(totalCheck{}))
}

// TestReportFlagsTheTotalAndALateResult checks the report's violations
// for the total, for a frozen run's result taken and for a run that went
// on unfenced after its freeze.
func TestReportFlagsTheTotalAndALateResult(t *testing.T) {
	t.Parallel()
	ok := Report{Admitted: 1, Samples: 1, Runs: 1, MaxRunning: 16, TotalLimit: 16, TotalWorkers: 8, SpawnMax: 3, MaxSpawnedCounted: 3, WorkerLimit: 2, ResourceRuns: 1, ExplicitRuns: 1}
	require.Empty(t, ok.Violations())
	bad := ok
	bad.OverTotal = "17 jobs running at 12:00:00.000, sum of the limits of the 8 workers alive then 16"
	bad.LateAccepted = 1
	require.Equal(t, []string{bad.OverTotal, "1 results of runs frozen past the fence were accepted"}, bad.Violations())
	resumed := ok
	resumed.Resumed, resumed.ResumedUnfenced = 3, 1
	require.Equal(t, []string{"1 runs frozen past their lease went on unfenced after SIGCONT"}, resumed.Violations())
}

// TestCheckResources: the needs of one process's running runs add up
// against its capacity at every start and end; runs of other processes
// do not add; a run ending as another starts frees its share first.
func TestCheckResources(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	capacity := &contracts.Resources{CPU: 2, Memory: 1 << 30}
	run := func(pid, from, to int, cpu float64, mem int64) attemptRun {
		return attemptRun{JobID: fmt.Sprintf("j%d-%d", pid, from), Worker: fmt.Sprintf("w%d", pid), PID: pid,
			Start: at(from), Until: at(to), Need: &contracts.Resources{CPU: cpu, Memory: mem}, Capacity: capacity}
	}
	for _, tc := range []struct {
		name     string
		runs     []attemptRun
		cpu      float64
		mem      int64
		over     int
		declared int
	}{
		{name: "two 1-core runs fill it", runs: []attemptRun{run(1, 0, 100, 1, 512<<20), run(1, 50, 150, 1, 512<<20)}, cpu: 2, mem: 1 << 30, declared: 2},
		{name: "back to back", runs: []attemptRun{run(1, 0, 100, 2, 1<<30), run(1, 100, 200, 2, 1<<30)}, cpu: 2, mem: 1 << 30, declared: 2},
		{name: "other processes do not add", runs: []attemptRun{run(1, 0, 100, 2, 256<<20), run(2, 0, 100, 2, 256<<20)}, cpu: 2, mem: 256 << 20, declared: 2},
		{name: "a 2-core run beside a 1-core one", runs: []attemptRun{run(1, 0, 100, 2, 256<<20), run(1, 50, 80, 1, 256<<20)}, cpu: 3, mem: 512 << 20, over: 1, declared: 2},
		{name: "memory over", runs: []attemptRun{run(1, 0, 100, 0.5, 768<<20), run(1, 10, 20, 0.5, 512<<20)}, cpu: 1, mem: 1280 << 20, over: 1, declared: 2},
		{name: "a journal without needs", runs: []attemptRun{{JobID: "x", PID: 1, Start: at(0), Until: at(10)}}, declared: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := checkResources(tc.runs)
			require.Equal(t, tc.declared, rc.Declared)
			require.InDelta(t, tc.cpu, rc.CPU.Held.CPU, 1e-9)
			require.Equal(t, tc.mem, rc.Memory.Held.Memory)
			require.Len(t, rc.Over, tc.over, "%v", rc.Over)
		})
	}

	// The report fails on an instant over capacity.
	bad := Report{Admitted: 1, Samples: 1, Runs: 1, ResourceRuns: 1, ExplicitRuns: 1, OverResources: []string{"w1 (pid 1) at 12:00:00.000 ran 2 jobs needing cpu=3,memory=512MiB, capacity cpu=2,memory=1GiB"}}
	require.Len(t, bad.Violations(), 1)
	require.Contains(t, bad.Violations()[0], "needed more than its capacity")
	// And on a run in which no job declared anything.
	vacuous := Report{Admitted: 1, Samples: 1, Runs: 1, ResourceRuns: 1}
	require.Equal(t, []string{"no journaled run declared resources: the capacity check measured defaults only"}, vacuous.Violations())
}
