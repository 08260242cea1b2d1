package peers

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	sluice := Figures{BurnDown: 9000, Steady: 3000, P99At500: 8, P99At2000: 30, RowsOneSecond: 3.9, WritesOneSecond: 1.2}
	tests := []struct {
		name         string
		target       Target
		sluice       Figures
		river, asynq Figures
		known, met   bool
		value        float64
		why          string
	}{
		{"burn-down below River", Targets[0], sluice, Figures{BurnDown: 12000}, nil, true, false, 0.75, ""},
		{"burn-down at River's", Targets[0], sluice, Figures{BurnDown: 9000}, nil, true, true, 1, ""},
		{"steady above Asynq", Targets[1], sluice, nil, Figures{Steady: 2000}, true, true, 1.5, ""},
		{"p99 lower than Asynq's is met", Targets[2], sluice, nil, Figures{P99At500: 16}, true, true, 0.5, ""},
		{"p99 higher than Asynq's is not", Targets[2], sluice, nil, Figures{P99At500: 4}, true, false, 2, ""},
		{"absolute bound, lower is better, above it", Targets[3], sluice, nil, nil, true, false, 30, ""},
		{"rows per job above the bound", Targets[4], sluice, nil, nil, true, false, 3.9, ""},
		{"rows per job on the bound", Targets[4], Figures{RowsOneSecond: 1.5}, nil, nil, true, true, 1.5, ""},
		{"rows per job missing though requests are there", Targets[4], Figures{WritesOneSecond: 1.2}, nil, nil, false, false, 0, "Sluice's figure missing"},
		{"write requests per job within the bound", Targets[5], sluice, nil, nil, true, true, 1.2, ""},
		{"write requests per job on the bound", Targets[5], Figures{WritesOneSecond: 1.5}, nil, nil, true, true, 1.5, ""},
		{"no peer figure", Targets[0], sluice, nil, nil, false, false, 0, "River's figure missing"},
		{"peer figure 0", Targets[1], sluice, nil, Figures{Steady: 0}, false, false, 0, "Asynq's figure is 0"},
		{"no Sluice figure", Targets[4], Figures{}, nil, nil, false, false, 0, "Sluice's figure missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := Judge([]Target{tc.target}, tc.sluice, tc.river, tc.asynq)[0]
			require.Equal(t, tc.known, v.Known)
			require.Equal(t, tc.met, v.Met)
			require.InDelta(t, tc.value, v.Value, 1e-9)
			require.Equal(t, tc.why, v.Why)
		})
	}
}

func TestGoalAndOutcome(t *testing.T) {
	t.Parallel()
	require.Equal(t, "≥ 1× (aim 1.5×)", Targets[0].Goal())
	require.Equal(t, "≤ 25", Targets[3].Goal())
	require.Equal(t, "burn-down of 100k no-op jobs vs River", Targets[0].Name())
	require.Equal(t, "met", Verdict{Known: true, Met: true}.Outcome())
	require.Equal(t, "not met", Verdict{Known: true}.Outcome())
	require.Equal(t, "unknown: River's figure missing", Verdict{Why: "River's figure missing"}.Outcome())
}

// sluiceOutput is what the benchmarks print, with lines in between.
const sluiceOutput = `goos: linux
burn-down: 100000 jobs admitted in 3.2s
burn-down: 100000 jobs completed in 12.5s = 8000 jobs/s (4 workers × 256 slots; 1.000 offers per dispatched job; target ≥ 10,000)
store rows written per completed job, burn-down: 4.013 (admit 1.000, claim 1.000, heartbeat 1.000, update 1.013; side rows 0.020; 401300 job rows; target ≤ 1.5 for jobs of 1 s)
store writes per completed job, burn-down: 0.052 (admit 0.001, claim 0.010; 5200 writes in 900 transactions = 0.009 transactions per job; target ≤ 1.5 for jobs of 1 s)
steady, 64 HTTP clients, single submits: 2500 jobs/s completed (30000 no-op jobs in 12s, submission alone 11s; 4 workers × 64 slots; target ≥ 3,000)
store writes per completed job, steady: 1.900 (admit 1.000)
submit → running at 500 jobs/s: p50 2.5ms, p99 7.25ms, max 20ms (2000 jobs; target p99 ≤ 10 ms)
submit → running at 2000 jobs/s: p50 5ms, p99 31.5ms, max 40ms (8000 jobs; target p99 ≤ 25 ms)
store rows written per completed job, jobs of 1 s: 4.5 (heartbeat 1.5)
store writes per completed job, jobs of 1 s: 1.234 (heartbeat 0.2)
store writes per completed job, something else: 9
store rows written per completed job, something else: 19
BenchmarkBurnDown 1 12 jobs/s
`

func TestParseSluice(t *testing.T) {
	t.Parallel()
	f, err := ParseSluice(strings.NewReader(sluiceOutput))
	require.NoError(t, err)
	require.Equal(t, Figures{BurnDown: 8000, RowsBurnDown: 4.013, WritesBurnDown: 0.052, Steady: 2500, WritesSteady: 1.9,
		P50At500: 2.5, P99At500: 7.25, P99At2000: 31.5, RowsOneSecond: 4.5, WritesOneSecond: 1.234}, f)

	_, err = ParseSluice(strings.NewReader("submit → running at 500 jobs/s: p50 2.5, p99 7ms, max 1ms\n"))
	require.ErrorContains(t, err, "p50")
}

func TestReadPeersOnlyThisRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		f, err := os.OpenFile(filepath.Join(dir, name+".jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		for _, l := range lines {
			_, err = f.WriteString(l + "\n")
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
	}
	write("river-burn", `{"opts":{"label":"w1000"},"burn_per_s":99999}`)
	mark, err := MarkResults(dir)
	require.NoError(t, err)
	require.Equal(t, 1, mark["river-burn"])
	require.Equal(t, 0, mark["asynq-steady"])

	write("river-burn", `{"opts":{"label":"w1000"},"burn_per_s":13000}`, `{"opts":{"label":"other"},"burn_per_s":1}`)
	write("river-steady", `{"opts":{"label":"w1000-max"},"completed_per_s":1400}`,
		`{"opts":{"label":"w1000-r500"},"lat_p50_ms":6.5,"lat_p99_ms":22}`)
	write("asynq-steady", `{"opts":{"label":"c100-max"},"completed_per_s":2700}`,
		`{"opts":{"label":"c100-10ms-r500"},"lat_p50_ms":6.4,"lat_p99_ms":16.2}`,
		`{"opts":{"label":"c100-10ms-r500"},"lat_p50_ms":7,"lat_p99_ms":18}`,
		`{"opts":{"label":"c100-10ms-r500"},"lat_p50_ms":5,"lat_p99_ms":100}`)
	river, asynq, err := ReadPeers(dir, mark)
	require.NoError(t, err)
	require.Equal(t, Figures{BurnDown: 13000, Steady: 1400, P50At500: 6.5, P99At500: 22}, river)
	// No burn-down line for Asynq in this run; three latency runs: the median.
	require.Equal(t, Figures{Steady: 2700, P50At500: 6.4, P99At500: 18}, asynq)

	write("asynq-burn", "not json")
	_, _, err = ReadPeers(dir, mark)
	require.ErrorContains(t, err, "asynq-burn.jsonl line 1")
}

func TestPrint(t *testing.T) {
	t.Parallel()
	sluice := Figures{BurnDown: 8000, Steady: 2500, P99At500: 7.25, P99At2000: 31.5, RowsOneSecond: 4.5, WritesOneSecond: 1.234}
	river := Figures{BurnDown: 13000}
	asynq := Figures{Steady: 2700, P99At500: 16.2}
	var buf bytes.Buffer
	require.NoError(t, Print(&buf, "peers: not set up", sluice, river, asynq, Judge(Targets, sluice, river, asynq)))
	out := regexp.MustCompile(` +`).ReplaceAllString(buf.String(), " ")
	require.True(t, strings.HasPrefix(out, "peers: not set up\n"))
	for _, want := range []string{
		"burn-down of 100k no-op jobs (jobs/s)",
		"burn-down of 100k no-op jobs (jobs/s) 8000 13000 –\n",
		"burn-down of 100k no-op jobs vs River 0.615× ≥ 1× (aim 1.5×) not met\n",
		"steady, single submits, completed vs Asynq 0.926× ≥ 1× (aim 1.5×) not met\n",
		"submit → running p99 at 500/s vs Asynq 0.448× ≤ 1× (aim ≤ 5 ms) met\n",
		"submit → running p99 at 2,000/s 31.5 ≤ 25 not met\n",
		"store rows written per completed job, jobs of 1 s 4.5 ≤ 1.5 not met\n",
		"store writes per completed job, jobs of 1 s 1.23 ≤ 1.5 (write requests, not rows) met\n",
	} {
		require.Contains(t, out, want)
	}
}
