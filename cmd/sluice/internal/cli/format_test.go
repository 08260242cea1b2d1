package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestFmtDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{850 * time.Millisecond, "850ms"},
		{2400 * time.Millisecond, "2.4s"},
		{42 * time.Second, "42s"},
		{65 * time.Second, "1m05s"},
		{2*time.Hour + 3*time.Minute, "2h03m"},
		{76 * time.Hour, "3d04h"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, fmtDuration(tc.d), tc.d.String())
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"ünïcode ✓", "ünïcode ✓"},
		{"\x1b[31mred\x1b[0m", "?[31mred?[0m"},
		{"line\nbreak\rcr\ttab", "line?break?cr?tab"},
		{"bad \xff utf8", "bad ? utf8"},
		{"c1 \u009b control", "c1 ? control"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, sanitize(tc.in), "%q", tc.in)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", truncate("abc", 3))
	require.Equal(t, "ab…", truncate("abcd", 3))
	require.Equal(t, "éé…", truncate("éééé", 3))
	require.Equal(t, "", truncate("abc", 0))
}

func TestWaitAndRunTime(t *testing.T) {
	t.Parallel()
	now := testTime.Add(5 * time.Second)
	pending := testJob(contracts.StatePending)
	running := testJob(contracts.StateRunning)
	done := testJob(contracts.StateSucceeded)
	cancelledPending := testJob(contracts.StatePending)
	cancelledPending.State = contracts.StateCancelled
	fin := testTime.Add(time.Second)
	cancelledPending.FinishedAt = &fin

	tests := []struct {
		name      string
		job       contracts.Job
		wait, run string
	}{
		{"pending waits until now", pending, "5.0s", "-"},
		{"running runs until now", running, "10ms", "5.0s"},
		{"finished ran until it finished", done, "10ms", "2.0s"},
		{"cancelled before it ran", cancelledPending, "1.0s", "-"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.wait, durationOr(waitTime(tc.job, now)), tc.name)
		require.Equal(t, tc.run, durationOr(runTime(tc.job, now)), tc.name)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	done := testJob(contracts.StateFailed)
	done.Error = "handler: exit status 3"
	tests := []struct {
		name string
		ev   contracts.Event
		job  contracts.Job
		want string
	}{
		{"pending", contracts.StateEvent(testJob(contracts.StatePending)), contracts.Job{}, "pending    claim 0"},
		{"running", contracts.StateEvent(testJob(contracts.StateRunning)), contracts.Job{}, "running    claim 1  on worker-01"},
		{"failed with run time and error", contracts.StateEvent(done), done, "failed     attempt 1/3  claim 1  on worker-01  ran 2.0s  handler: exit status 3"},
		{"progress", contracts.Event{Type: contracts.EventProgress, Progress: &contracts.Progress{Percent: 42.4, Stage: "copy", Message: "3 of 7"}}, contracts.Job{}, "progress   42.4% copy: 3 of 7"},
		{"progress to a tenth", contracts.Event{Type: contracts.EventProgress, Progress: &contracts.Progress{Percent: 30.0003138}}, contracts.Job{}, "progress   30%"},
		{"progress without stage", contracts.Event{Type: contracts.EventProgress, Progress: &contracts.Progress{Percent: 5, Message: "m"}}, contracts.Job{}, "progress   5% m"},
		{"hostile worker name", contracts.Event{Type: contracts.EventState, State: contracts.StateRunning, Claim: 1, Worker: "w\x1b[2J"}, contracts.Job{}, "running    claim 1  on w?[2J"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, describe(tc.ev, tc.job), tc.name)
	}
}

func TestBarLine(t *testing.T) {
	t.Parallel()
	now := testTime.Add(3 * time.Second)
	running := testJob(contracts.StateRunning)
	withProgress := running
	withProgress.Progress = &contracts.Progress{Percent: 25, Stage: "sleeping", Message: "500ms of 2s"}
	full := running
	full.Progress = &contracts.Progress{Percent: 100}
	ragged := running
	ragged.Progress = &contracts.Progress{Percent: 30.0003138}
	tenth := running
	tenth.Progress = &contracts.Progress{Percent: 42.46}
	tests := []struct {
		name string
		job  contracts.Job
		want string
	}{
		{"pending", testJob(contracts.StatePending), "pending    waiting for a worker  3.0s"},
		{"running without progress", running, "running  on worker-01  3.0s"},
		{"running with progress", withProgress, "[######------------------]  25%  sleeping: 500ms of 2s  on worker-01  3.0s"},
		{"complete", full, "[########################] 100%  on worker-01  3.0s"},
		{"percent rounded", ragged, "[#######-----------------]  30%  on worker-01  3.0s"},
		{"percent to a tenth", tenth, "[##########--------------] 42.5%  on worker-01  3.0s"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, barLine(tc.job, now), tc.name)
	}
}

func TestWriteJobTable(t *testing.T) {
	t.Parallel()
	now := testTime.Add(3 * time.Second)
	failed := testJob(contracts.StateFailed)
	failed.Error = "handler: " + strings.Repeat("x", 100)
	failed.Claim = 7 // claims that never ran count too
	pending := testJob(contracts.StatePending)
	pending.ID = "01a20614-0000-7000-8000-000000000002"
	pending.CancelRequested = true
	var buf bytes.Buffer
	writeJobTable(&buf, []contracts.Job{failed, pending}, now, 20)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^ID\s+KIND\s+STATE\s+ATTEMPT\s+CLAIM\s+WORKER\s+AGE\s+WAIT\s+RUN\s+ERROR$`, lines[0])
	require.Regexp(t, `^`+testID+`\s+sleep\s+failed\s+1/3\s+7\s+worker-01\s+3\.0s\s+10ms\s+2\.0s\s+handler: xxxxxxxxxx…$`, lines[1],
		"attempt of max attempts, then the claim counter")
	require.Regexp(t, `\s+pending\*\s+0/3\s+0\s+-\s+3\.0s\s+3\.0s\s+-$`, lines[2], "no trailing spaces for an empty error")
	for _, l := range lines {
		require.Equal(t, strings.TrimRight(l, " "), l)
	}
}

func TestWriteJobView(t *testing.T) {
	t.Parallel()
	j := testJob(contracts.StateSucceeded)
	j.Key = "report-42"
	j.Payload = []byte(`{"ms":2000}`)
	j.Result = []byte(`{"slept_ms":2000}`)
	var buf bytes.Buffer
	writeJobView(&buf, j, testTime.Add(time.Minute))
	out := buf.String()
	for _, want := range []string{
		"id:         " + testID + "\n",
		"state:      succeeded\n",
		"attempt:    1 of at most 3 (the run number)\n",
		"claim:      1 (dispatch claims so far; it fences stale results, it is not a run count)\n",
		"worker:     worker-01\n",
		"key:        report-42\n",
		"(1m00s ago)",
		"(waited 10ms)",
		"(ran 2.0s)",
		"payload:    {\"ms\":2000}\n",
		"result:     {\"slept_ms\":2000}\n",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "error:")
	require.NotContains(t, out, "progress:")
	require.NotContains(t, out, "resources:", "none declared")
	require.NotContains(t, out, "used:", "none measured")

	j.Resources = &contracts.Resources{CPU: 0.5, Memory: 512 << 20}
	j.Usage = &contracts.Usage{Mechanism: contracts.LimitCgroupV2, PeakMemory: 70 << 20, CPUSeconds: 0.25}
	buf.Reset()
	writeJobView(&buf, j, testTime.Add(time.Minute))
	out = buf.String()
	require.Contains(t, out, "resources:  cpu 0.5, memory 512MiB\n")
	require.Contains(t, out, "used:       peak memory 70.0MiB, 0.25 cpu-seconds (cgroup-v2)\n")
	j.Resources = &contracts.Resources{CPU: 2}
	buf.Reset()
	writeJobView(&buf, j, testTime.Add(time.Minute))
	require.Contains(t, buf.String(), "resources:  cpu 2, the rest the worker's default\n")
}

func TestWriteStats(t *testing.T) {
	t.Parallel()
	st := contracts.Stats{
		MaxActive: 4, Active: 1,
		Counts:       map[contracts.JobState]int{contracts.StateRunning: 1, contracts.StateSucceeded: 7},
		TenantActive: map[string]int{"default": 1},
		Workers: []contracts.WorkerInfo{
			{ID: "worker-02", Kinds: []string{"exec", "sleep"}, Capacity: 1, SeenAt: testTime},
			{ID: "worker-01", Kinds: []string{"sleep"}, Capacity: 2, InFlight: 1, SeenAt: testTime, Draining: true},
		},
	}
	var buf bytes.Buffer
	writeStats(&buf, st, testTime.Add(2*time.Second))
	out := buf.String()
	require.Contains(t, out, "active:           1 of 4 (25% of the global cap)\n")
	require.Contains(t, out, "tenant cap:       none\n")
	require.Contains(t, out, "jobs:             pending 0, running 1, succeeded 7, failed 0, cancelled 0\n")
	require.Contains(t, out, "active by tenant: default 1\n")
	require.Contains(t, out, "workers:          2, 1 in flight of 3\n")
	require.Regexp(t, `(?m)^worker-01 \(draining\)\s+1\s+2\s+sleep\s+2\.0s ago\nworker-02\s+0\s+1\s+exec,sleep\s+2\.0s ago$`, out, "workers sorted by id")
}

func TestFmtPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{30.0003138, "30"},
		{42.46, "42.5"},
		{99.94, "99.9"},
		{99.96, "100"},
		{100, "100"},
		{12.5, "12.5"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, fmtPercent(tc.in), "%v", tc.in)
	}
}
