package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// idLine is a job id on a line of its own.
var idLine = regexp.MustCompile(`^[0-9a-f-]{36}\n$`)

// TestCLISubmitGetLsStats drives the real binary through a job's life:
// submit, get, ls and stats, in people's format and with --json.
func TestCLISubmitGetLsStats(t *testing.T) {
	t.Parallel()
	s := startStack(t, 2, nil)

	r := s.run("submit", "sleep", "--payload", `{"ms":20}`, "--key", "first")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, idLine, r.stdout)
	id := strings.TrimSpace(r.stdout)
	s.waitState(id, contracts.StateSucceeded)

	r = s.run("get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "id:         "+id+"\n")
	require.Contains(t, r.stdout, "state:      succeeded\n")
	require.Contains(t, r.stdout, "key:        first\n")
	require.Contains(t, r.stdout, `result:     {"slept_ms":20}`)

	r = s.run("get", id, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var j contracts.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
	require.Equal(t, id, j.ID)
	require.Equal(t, contracts.StateSucceeded, j.State)
	require.Empty(t, r.stderr)

	// Payload from stdin, job printed as JSON.
	r = s.cli(nil, `{"ms": 10}`, "--json", "submit", "sleep", "--payload", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
	require.Equal(t, "sleep", j.Kind)
	require.JSONEq(t, `{"ms":10}`, string(j.Payload))
	second := j.ID
	s.waitState(second, contracts.StateSucceeded)

	r = s.run("ls")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^ID\s+KIND\s+STATE\s+ATTEMPT\s+CLAIM\s+WORKER\s+AGE\s+WAIT\s+RUN\s+ERROR$`, lines[0])
	// attempt 1; the claim is 1 or more (an offer a worker answered busy, or
	// one lost under load, takes a claim but no run)
	require.Regexp(t, `^`+second+`\s+sleep\s+succeeded\s+1/\d+\s+\d+\s+worker-0[12]\s`, lines[1], "newest first")
	require.Regexp(t, `^`+id+`\s+sleep\s+succeeded\s+1/\d+\s+\d+\s`, lines[2])

	r = s.run("ls", "--json", "--state", "succeeded", "--kind", "sleep", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	var page contracts.JobPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 1)
	require.NotEmpty(t, page.NextCursor)

	r = s.run("ls", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "more: sluice ls --cursor ")
	cursor := strings.TrimSpace(strings.TrimPrefix(r.stderr, "more: sluice ls --cursor "))
	r = s.run("ls", "--limit", "1", "--cursor", cursor)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, id)

	r = s.run("ls", "--all", "--limit", "1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 2, "--all follows the cursor")

	r = s.run("ls", "--state", "failed")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, "no jobs\n", r.stderr)

	r = s.run("stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^jobs:\s+pending 0, running 0, succeeded 2, failed 0, cancelled 0$`, r.stdout)
	require.Regexp(t, `(?m)^worker-01\s+0\s+4\s+exec,sleep\s`, r.stdout)
	require.Regexp(t, `(?m)^worker-02\s+0\s+4\s+exec,sleep\s`, r.stdout)

	r = s.run("stats", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st contracts.Stats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Workers, 2)
	require.Equal(t, 2, st.Counts[contracts.StateSucceeded])

	// The same key while the job is active returns that job.
	r = s.run("submit", "sleep", "--payload", `{"ms":60000}`, "--key", "long")
	require.Equal(t, 0, r.code, r.stderr)
	long := strings.TrimSpace(r.stdout)
	r = s.run("submit", "sleep", "--key", "long")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, long+"\n", r.stdout)
	require.Contains(t, r.stderr, `an active job with key "long" exists already`)
	require.Equal(t, 0, s.run("cancel", long).code)

	r = s.run("get", "01a20614-0000-7000-8000-000000000000")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "sluice get: no such job (HTTP 404 not_found)")
}

// TestCLIExitCodes checks the exit code of each outcome against the real
// stack: succeeded 0, failed 1, cancelled 3, usage 2.
func TestCLIExitCodes(t *testing.T) {
	t.Parallel()
	s := startStack(t, 2, nil)

	t.Run("succeeded", func(t *testing.T) {
		t.Parallel()
		r := s.run("submit", "sleep", "--payload", `{"ms":300}`, "--wait")
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Regexp(t, idLine, lines[0]+"\n", "the id comes first")
		require.Regexp(t, `succeeded\s+attempt 1/3\s+claim \d+\s+on worker-0[12]\s+ran `, lines[len(lines)-1])
	})
	t.Run("succeeded, json", func(t *testing.T) {
		t.Parallel()
		r := s.run("submit", "sleep", "--payload", `{"ms":10}`, "--wait", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var j contracts.Job
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j), "only the final job on stdout: %q", r.stdout)
		require.Equal(t, contracts.StateSucceeded, j.State)
		require.JSONEq(t, `{"slept_ms":10}`, string(j.Result))
	})
	t.Run("failed exec", func(t *testing.T) {
		t.Parallel()
		// A failed run runs again, until max_attempts runs.
		r := s.run("submit", "exec", "--payload", `{"argv":["sh","-c","exit 3"]}`, "--wait")
		require.Equal(t, 1, r.code, r.stderr)
		require.Regexp(t, `pending\s+attempt 1/3\s+claim \d+\n`, r.stdout)
		require.Regexp(t, `failed\s+attempt 3/3\s+claim \d+\s+on worker-0[12]\s+ran \S+\s+handler: exit status 3\n$`, r.stdout)
		r = s.run("submit", "exec", "--max-attempts", "1", "--payload", `{"argv":["sh","-c","exit 3"]}`, "--wait")
		require.Equal(t, 1, r.code, r.stderr)
		require.Regexp(t, `failed\s+attempt 1/1\s+claim \d+\s+on worker-0[12]\s+ran \S+\s+handler: exit status 3\n$`, r.stdout)
	})
	t.Run("failed input", func(t *testing.T) {
		t.Parallel()
		// A program the workers do not allow fails its run (input: no
		// retry); a payload the gateway can check is refused at submit.
		r := s.run("submit", "exec", "--payload", `{"argv":["false"]}`, "--wait", "--json")
		require.Equal(t, 1, r.code, r.stderr)
		var j contracts.Job
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
		require.Equal(t, contracts.ClassInput, contracts.ClassOf(j.Error), j.Error)
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		r := s.run("submit", "sleep", "--payload", `{"ms":60000}`)
		require.Equal(t, 0, r.code, r.stderr)
		id := strings.TrimSpace(r.stdout)
		s.waitState(id, contracts.StateRunning)
		_, lines, wait := s.background("watch", id)
		waitLine(t, lines, "running")

		r = s.run("cancel", id)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, []string{"running (cancel requested)\n", "cancelled\n"}, r.stdout)

		w := wait()
		require.Equal(t, 3, w.code, w.stderr)
		require.Regexp(t, `cancelled\s+attempt 1/3\s+claim \d+\s+on worker-0[12]\s+ran \S+\s+cancelled: cancelled by request\n$`, w.stdout)

		r = s.run("watch", id, "--json")
		require.Equal(t, 3, r.code, "watching a finished job exits with its outcome")
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ev))
		require.Equal(t, contracts.EventSnapshot, ev.Type)
		require.Equal(t, contracts.StateCancelled, ev.State)

		r = s.run("cancel", id)
		require.Equal(t, 0, r.code, "cancelling a cancelled job is fine")
		require.Equal(t, "cancelled\n", r.stdout)
	})
	t.Run("cancel --wait", func(t *testing.T) {
		t.Parallel()
		r := s.run("submit", "sleep", "--deadline", "5m", "--priority", "9", "--max-attempts", "1", "--payload", `{"ms":60000}`, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var j contracts.Job
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
		r = s.run("cancel", j.ID, "--wait", "--json")
		require.Equal(t, 3, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
		require.Equal(t, contracts.StateCancelled, j.State)
	})
	t.Run("cancel of a finished job", func(t *testing.T) {
		t.Parallel()
		r := s.run("submit", "sleep", "--wait", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var j contracts.Job
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
		r = s.run("cancel", j.ID)
		require.Equal(t, 1, r.code)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "sluice cancel: job "+j.ID+" already succeeded; there is nothing to cancel")
	})
	t.Run("interrupted", func(t *testing.T) {
		t.Parallel()
		cmd, lines, wait := s.background("submit", "sleep", "--payload", `{"ms":60000}`, "--wait")
		id := strings.TrimSpace(waitLine(t, lines, "-"))
		waitLine(t, lines, "running")
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		w := wait()
		require.Equal(t, 130, w.code, w.stderr)
		require.Contains(t, w.stderr, "stopped following "+id+"; the job goes on (sluice watch "+id+")")
		require.Equal(t, contracts.StateRunning, s.job(id).State, "the job goes on")
		require.Equal(t, 0, s.run("cancel", id).code)
	})
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{},
			{"frobnicate"},
			{"submit"},
			{"submit", "sleep", "--payload", "{not json"},
			{"get"},
			{"get", "a/b"},
			{"ls", "--state", "done"},
			{"watch", "--all", "x"},
			{"cancel"},
			{"stats", "--bogus"},
		} {
			r := s.run(args...)
			require.Equal(t, 2, r.code, "sluice %v: %s", args, r.stderr)
			require.Empty(t, r.stdout, "sluice %v", args)
			require.NotEmpty(t, r.stderr, "sluice %v", args)
		}
		r := s.run("ls", "-h")
		require.Equal(t, 0, r.code)
		require.Contains(t, r.stdout, "usage: sluice ls")
	})
}

// TestCLIRejected: a submit shed at admission exits 4 and says which cap.
func TestCLIRejected(t *testing.T) {
	t.Parallel()
	s := startStack(t, -1, map[string]string{"SLUICE_MAX_ACTIVE": "1"})
	r := s.run("submit", "sleep")
	require.Equal(t, 0, r.code, r.stderr)

	r = s.run("submit", "sleep")
	require.Equal(t, 4, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "the global cap of 1 active jobs is reached")
	require.Contains(t, r.stderr, "HTTP 429 global_cap_reached, retry after")

	r = s.run("submit", "sleep", "--wait", "--json")
	require.Equal(t, 4, r.code, r.stderr)
	var eb contracts.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &eb), "--json prints the error body")
	require.Equal(t, contracts.CodeGlobalCap, eb.Error.Code)
	require.Equal(t, "global", eb.Error.Limit)

	r = s.run("stats")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^active:\s+1 of 1 \(100% of the global cap\)$`, r.stdout)
	require.Regexp(t, `(?m)^workers:\s+0$`, r.stdout)
}

// TestCLIToken: with API tokens configured, the token comes from
// SLUICE_TOKEN or --token, and following a job uses it too.
func TestCLIToken(t *testing.T) {
	t.Parallel()
	s := startStack(t, 1, map[string]string{"SLUICE_API_TOKENS": "acme:tok-acme,globex:tok-globex"})

	r := s.run("stats")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "HTTP 401 unauthorized")

	r = s.cli(map[string]string{"SLUICE_TOKEN": "tok-acme"}, "", "submit", "sleep", "--payload", `{"ms":50}`, "--wait")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.Split(r.stdout, "\n")[0]

	r = s.run("--token", "tok-acme", "get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant:     acme\n")

	r = s.run("get", id, "--token", "tok-globex")
	require.Equal(t, 1, r.code, "another tenant's job is not found")
	require.Contains(t, r.stderr, "HTTP 404")

	r = s.cli(map[string]string{"SLUICE_TOKEN": "tok-globex"}, "", "watch", id)
	require.Equal(t, 1, r.code, "another tenant's job cannot be watched")
	require.Contains(t, r.stderr, "no such job")
	require.NotContains(t, r.stderr, "tok-globex", "no message shows a token")
}

// TestCLIWatchAll follows every job of the tenant until interrupted.
func TestCLIWatchAll(t *testing.T) {
	t.Parallel()
	s := startStack(t, 1, nil)
	if !s.hasEventRoutes() {
		t.Skip("the gateway serves no event stream (GET /v1/events) yet")
	}
	submit := func(kind, payload string) string {
		r := s.run("submit", kind, "--payload", payload)
		require.Equal(t, 0, r.code, r.stderr)
		return strings.TrimSpace(r.stdout)
	}

	cmd, lines, wait := s.background("watch", "--json")
	line := firstLine(t, lines, func() string { return submit("sleep", `{"ms":100}`) })
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
	for ev.State != contracts.StateSucceeded {
		line = waitLine(t, lines, ev.JobID)
		ev = contracts.Event{}
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	w := wait()
	require.Equal(t, 0, w.code, "interrupting watch --all is its normal end: %s", w.stderr)

	// People's format: one line per change with the job's id and kind.
	cmd, lines, wait = s.background("watch")
	line = firstLine(t, lines, func() string {
		r := s.run("submit", "exec", "--max-attempts", "1", "--payload", `{"argv":["sh","-c","exit 5"]}`)
		require.Equal(t, 0, r.code, r.stderr)
		return strings.TrimSpace(r.stdout)
	})
	if !strings.Contains(line, "failed") {
		line = waitLine(t, lines, "failed")
	}
	require.Regexp(t, `^\d\d:\d\d:\d\d  [0-9a-f-]{36}  exec\s+failed\s+claim \d+\s+on worker-01\s+handler: exit status 5$`, line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, wait().code)
}

// firstLine submits jobs with submit, one a second, until the watcher (whose
// stream starts with new events, once it is connected) prints a line, and
// returns that line.
func firstLine(t *testing.T, lines <-chan string, submit func() string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		submit()
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the watcher ended")
			return line
		case <-time.After(time.Second):
		}
	}
	t.Fatal("the watcher never printed a line")
	return ""
}

// TestCLIProgress: a followed sleep job shows its progress events.
func TestCLIProgress(t *testing.T) {
	t.Parallel()
	s := startStack(t, 1, nil)
	if !s.hasEventRoutes() {
		t.Skip("the gateway serves no event stream yet")
	}
	r := s.run("submit", "sleep", "--payload", `{"ms":60000}`)
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	_, lines, wait := s.background("watch", id, "--json")
	first := waitLine(t, lines, id)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(first), &ev), first)
	require.Equal(t, contracts.EventSnapshot, ev.Type)
	line := waitLine(t, lines, `"type":"progress"`)
	require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
	require.Equal(t, id, ev.JobID)
	require.Equal(t, "sleeping", ev.Progress.Stage, "the sleep kind reports progress while it sleeps")

	require.Equal(t, 0, s.run("cancel", id).code)
	w := wait()
	require.Equal(t, 3, w.code, w.stderr)
	last := strings.Split(strings.TrimSpace(w.stdout), "\n")
	require.NoError(t, json.Unmarshal([]byte(last[len(last)-1]), &ev))
	require.Equal(t, contracts.EventState, ev.Type)
	require.Equal(t, contracts.StateCancelled, ev.State)
}

// TestCLISubmitBatch: submit --batch sends a JSON Lines file (or stdin) to
// POST /v1/jobs/batch and prints one line per job, in order: the job's id,
// or "refused: line N: " and the reason, lines counted from 1 as in the
// file (never the gateway's 0-based "jobs[i]").
func TestCLISubmitBatch(t *testing.T) {
	t.Parallel()
	s := startStack(t, 1, nil)
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		`{"kind":"sleep","payload":{"ms":5}}`,
		``,
		`# a comment`,
		`{"kind":"sleep","payload":{"ms":5},"priority":7,"key":"batch-1"}`,
		`{"kind":"sleep","priority":12}`,
		`{"kind":"sleep","key":"batch-1"}`,
		`{"kind":"sleep","payload":{"ms":5}}`,
	}, "\n")+"\n"), 0o600))
	r := s.run("submit", "--batch", file)
	require.Equal(t, 1, r.code, "a job was refused: %s", r.stderr)
	out := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, out, 5, "one line per job: %s", r.stdout)
	require.Regexp(t, `^refused: line 5: .*priority`, out[2])
	require.Equal(t, out[1], out[3], "line 6 joined line 4's job")
	require.Contains(t, r.stderr, "line 6: an active job with key \"batch-1\"")
	require.Contains(t, r.stderr, "1 of 5 jobs refused")
	require.NotContains(t, r.stdout+r.stderr, "jobs[", "one numbering: the file's lines")
	for _, id := range []string{out[0], out[1], out[4]} {
		require.Eventually(t, func() bool { return s.job(id).State == contracts.StateSucceeded }, 30*time.Second, 20*time.Millisecond)
	}

	r = s.cli(nil, `{"kind":"sleep"}`+"\n"+`{"kind":"sleep","priority":12}`, "submit", "--batch", "-", "--json")
	require.Equal(t, 1, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	var refused contracts.SubmitReply
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &refused))
	require.NotNil(t, refused.Error)
	require.Regexp(t, `^line 2: .*priority`, refused.Error.Message)

	r = s.cli(nil, `{"kind":"sleep"}`+"\n"+`{"kind":"sleep"}`, "submit", "--batch", "-", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	var reply contracts.SubmitReply
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &reply))
	require.Equal(t, 202, reply.Status)

	r = s.run("submit", "--batch", "-")
	require.Equal(t, 2, r.code, "no jobs: usage error")
	r = s.cli(nil, "{not json}\n", "submit", "--batch", "-")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "line 1")
}

// blobLine is a submit body of a kind no worker runs whose payload takes
// about size bytes.
func blobLine(size int) string {
	return `{"kind":"blob","payload":{"data":"` + strings.Repeat("x", size) + `"}}`
}

// TestCLISubmitBatchSplitsByBytes: a --batch file whose jobs together
// exceed the gateway's batch body limit (SLUICE_GATEWAY_MAX_BATCH_BYTES, 1 MiB by
// default) goes in several requests, so every job is admitted, never a 413
// for the whole file.
func TestCLISubmitBatchSplitsByBytes(t *testing.T) {
	t.Parallel()
	s := startStack(t, -1, nil)
	r := s.cli(nil, strings.Repeat(blobLine(400_000)+"\n", 3), "submit", "--batch", "-")
	require.Equal(t, 0, r.code, r.stderr)
	ids := strings.Fields(r.stdout)
	require.Len(t, ids, 3, r.stdout)
	for _, id := range ids {
		require.Equal(t, contracts.StatePending, s.job(id).State)
	}
}

// TestCLISubmitBatchUnderALowerLimit: against a gateway whose
// SLUICE_GATEWAY_MAX_BATCH_BYTES is below the CLI's 1 MiB, a request answered 413
// goes again in halves; a job over the limit on its own is refused on its
// line and the others are admitted.
func TestCLISubmitBatchUnderALowerLimit(t *testing.T) {
	t.Parallel()
	s := startStack(t, -1, map[string]string{"SLUICE_GATEWAY_MAX_BATCH_BYTES": "300000"})
	r := s.cli(nil, strings.Repeat(blobLine(100_000)+"\n", 4)+blobLine(400_000)+"\n"+blobLine(10)+"\n", "submit", "--batch", "-")
	require.Equal(t, 1, r.code, r.stderr)
	out := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, out, 6, r.stdout)
	for i, line := range out {
		if i == 4 {
			require.Regexp(t, `^refused: line 5: .*\(HTTP 413`, line)
			continue
		}
		require.Equal(t, contracts.StatePending, s.job(line).State, "line %d", i+1)
	}
}
