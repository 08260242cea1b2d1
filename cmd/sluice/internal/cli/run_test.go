package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestRunUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{name: "no command", args: nil, code: ExitUsage, stderr: "usage: sluice"},
		{name: "unknown command", args: []string{"frobnicate"}, code: ExitUsage, stderr: `unknown command "frobnicate"`},
		{name: "help", args: []string{"help"}, code: ExitOK, stdout: "commands:"},
		{name: "-h", args: []string{"-h"}, code: ExitOK, stdout: "exit codes:"},
		{name: "help of a command", args: []string{"help", "ls"}, code: ExitOK, stdout: "usage: sluice ls"},
		{name: "help of an unknown command", args: []string{"help", "nope"}, code: ExitUsage, stderr: "unknown command"},
		{name: "command -h", args: []string{"get", "-h"}, code: ExitOK, stdout: "exit codes: 0 when the job exists"},
		{name: "command --help after an argument", args: []string{"watch", "x", "--help"}, code: ExitOK, stdout: "usage: sluice watch"},
		{name: "unknown global flag", args: []string{"--nope", "ls"}, code: ExitUsage, stderr: "flag provided but not defined"},
		{name: "unknown command flag", args: []string{"ls", "--nope"}, code: ExitUsage, stderr: "sluice ls: flag provided but not defined: -nope"},
		{name: "submit without kind", args: []string{"submit"}, code: ExitUsage, stderr: "missing argument"},
		{name: "submit with two kinds", args: []string{"submit", "a", "b"}, code: ExitUsage, stderr: `unexpected argument "b"`},
		{name: "payload not JSON", args: []string{"submit", "sleep", "--payload", "{ms:1}"}, code: ExitUsage, stderr: "--payload is not valid JSON"},
		{name: "payload file missing", args: []string{"submit", "sleep", "--payload", "@/nonexistent/p.json"}, code: ExitUsage, stderr: "no such file"},
		{name: "items not JSON", args: []string{"submit", "sleep", "--items", "[1,"}, code: ExitUsage, stderr: "--items is not a valid JSON array"},
		{name: "items line not JSON", args: []string{"submit", "sleep", "--items", "1\n{x}"}, code: ExitUsage, stderr: "line 2 is not valid JSON"},
		{name: "items with payload", args: []string{"submit", "sleep", "--items", "[1]", "--payload", "{}"}, code: ExitUsage, stderr: "do not go together"},
		{name: "window without items", args: []string{"submit", "sleep", "--concurrency", "3"}, code: ExitUsage, stderr: "need --items"},
		{name: "input without digest", args: []string{"submit", "sleep", "--input", "reads=file:///x"}, code: ExitUsage, stderr: "want name=uri@sha256"},
		{name: "ls parent not an id", args: []string{"ls", "--parent", "a b"}, code: ExitUsage, stderr: "not a job id"},
		{name: "get without id", args: []string{"get"}, code: ExitUsage, stderr: "missing argument"},
		{name: "get with a bad id", args: []string{"get", "../stats"}, code: ExitUsage, stderr: "is not a job id"},
		{name: "ls with a bad state", args: []string{"ls", "--state", "done"}, code: ExitUsage, stderr: `unknown state "done"`},
		{name: "ls with a bad kind", args: []string{"ls", "--kind", "Sleep!"}, code: ExitUsage, stderr: "is not a job kind"},
		{name: "ls with a bad limit", args: []string{"ls", "--limit", "501"}, code: ExitUsage, stderr: "--limit"},
		{name: "ls with --all and --cursor", args: []string{"ls", "--all", "--cursor", "x"}, code: ExitUsage, stderr: "do not go together"},
		{name: "ls with an argument", args: []string{"ls", "pending"}, code: ExitUsage, stderr: "unexpected argument"},
		{name: "watch --all with an id", args: []string{"watch", "--all", testID}, code: ExitUsage, stderr: "give no id"},
		{name: "watch --since not an event id", args: []string{"watch", "--since", "a b"}, code: ExitUsage, stderr: "--since"},
		{name: "cancel without id", args: []string{"cancel"}, code: ExitUsage, stderr: "missing argument"},
		{name: "stats with an argument", args: []string{"stats", "x"}, code: ExitUsage, stderr: "unexpected argument"},
		{name: "bad URL", args: []string{"--url", "ftp://x", "stats"}, code: ExitUsage, stderr: "must start with http:// or https://"},
		{name: "bad token", args: []string{"stats", "--token", "a b"}, code: ExitUsage, stderr: "the token must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			te := newTestEnv("http://127.0.0.1:1", false, nil)
			require.Equal(t, tc.code, te.run(tc.args...), "stderr: %s", te.stderr)
			require.Contains(t, te.stderr.String(), tc.stderr)
			require.Contains(t, te.stdout.String(), tc.stdout)
			if tc.code == ExitUsage {
				require.Empty(t, te.stdout.String(), "usage errors print nothing on stdout")
			}
		})
	}
}

func TestRunHelpNeverShowsTheToken(t *testing.T) {
	t.Parallel()
	te := newTestEnv("http://127.0.0.1:1", false, map[string]string{"SLUICE_TOKEN": "s3cr3t-token"})
	require.Equal(t, ExitOK, te.run("submit", "-h"))
	require.NotContains(t, te.stdout.String(), "s3cr3t-token")
}

func TestRunSubmit(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	var got []contracts.SubmitRequest
	f.handle("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req contracts.SubmitRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		got = append(got, req)
		status := http.StatusAccepted
		j := testJob(contracts.StatePending)
		if req.Key == "dup" {
			status, j.Key = http.StatusOK, "dup"
		}
		writeTestJSON(w, status, j)
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "p.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"ms": 7}`), 0o600))

	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("submit", "sleep", "--payload", `{"ms":5}`, "--key", "k1", "--priority", "3", "--deadline", "90s", "--max-attempts", "2",
		"--run-at", "30s", "--concurrency-key", "db", "--concurrency-limit", "2", "--stall-timeout", "1m", "--max-runtime", "2h",
		"--input", "reads=https://u@h/x.fq@"+strings.Repeat("a", 64), "--input", "ref=file:///data/ref@pin"))
	require.Equal(t, testID+"\n", te.stdout.String())
	require.Equal(t, contracts.SubmitRequest{Kind: "sleep", Payload: json.RawMessage(`{"ms":5}`), Key: "k1", Priority: 3, Deadline: "90s", MaxAttempts: 2,
		RunAt: "30s", ConcurrencyKey: "db", ConcurrencyLimit: 2, StallTimeout: "1m", MaxRuntime: "2h",
		Inputs: []contracts.InputRef{{Name: "reads", URI: "https://u@h/x.fq", SHA256: strings.Repeat("a", 64)},
			{Name: "ref", URI: "file:///data/ref", SHA256: "pin"}}}, got[0])

	items := filepath.Join(dir, "items.jsonl")
	require.NoError(t, os.WriteFile(items, []byte("{\"ms\": 1}\n\n{\"ms\": 2}\n"), 0o600))
	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("submit", "sleep", "--items", "@"+items, "--concurrency", "8", "--fail-fast"), te.stderr.String())
	require.JSONEq(t, `[{"ms":1},{"ms":2}]`, string(got[1].Items))
	require.Equal(t, 8, got[1].Concurrency)
	require.True(t, got[1].FailFast)
	got = got[:1]

	te = newTestEnv(f.srv.URL, false, nil)
	te.env.Stdin = strings.NewReader(` {"ms": 6}` + "\n")
	require.Equal(t, ExitOK, te.run("--json", "submit", "--payload", "-", "sleep"), te.stderr.String())
	var j contracts.Job
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &j))
	require.Equal(t, testID, j.ID)
	require.JSONEq(t, `{"ms":6}`, string(got[1].Payload))

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("submit", "sleep", "--payload", "@"+file, "--key", "dup"))
	require.JSONEq(t, `{"ms":7}`, string(got[2].Payload))
	require.Contains(t, te.stderr.String(), `an active job with key "dup" exists already`)

	// --cpu and --memory, or --resources, become the job's resources.
	for _, args := range [][]string{
		{"--cpu", "0.5", "--memory", "1.5GiB"},
		{"--resources", "cpu=0.5,memory=1536MiB"},
		{"--resources", "memory=1536MiB", "--cpu", "0.5"},
	} {
		te = newTestEnv(f.srv.URL, false, nil)
		require.Equal(t, ExitOK, te.run(append([]string{"submit", "exec"}, args...)...), te.stderr.String())
		require.JSONEq(t, `{"cpu":0.5,"memory":"1536MiB"}`, string(got[len(got)-1].Resources), "%v", args)
	}
}

func TestRunSubmitBadResources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--memory", "2GB"}, `memory: "2GB" is not an amount of memory`},
		{[]string{"--cpu", "two"}, `cpu: "two" is not a number of cores`},
		{[]string{"--cpu", "-1"}, `resources.cpu: -1 is negative`},
		{[]string{"--resources", "cpu=1", "--cpu", "2"}, `cpu is given twice`},
		{[]string{"--resources", "gpu=1"}, `"gpu" is not a resource`},
	} {
		te := newTestEnv("http://127.0.0.1:1", false, nil)
		require.Equal(t, ExitUsage, te.run(append([]string{"submit", "exec"}, tc.args...)...), "%v", tc.args)
		require.Contains(t, te.stderr.String(), tc.stderr, "%v", tc.args)
		require.Empty(t, te.stdout.String())
	}
}

func TestRunServerErrors(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		writeTestJSON(w, http.StatusTooManyRequests, contracts.ErrorBody{Error: contracts.ErrorDetail{
			Code: contracts.CodeGlobalCap, Message: "the global cap of 2 active jobs is reached, retry later", Limit: "global"}})
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestError(w, http.StatusNotFound, contracts.CodeNotFound, "no such job")
	})
	f.handle("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	})

	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitRejected, te.run("submit", "sleep"))
	require.Empty(t, te.stdout.String())
	require.Contains(t, te.stderr.String(), "the global cap of 2 active jobs is reached, retry later (HTTP 429 global_cap_reached, retry after 2s)")

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitRejected, te.run("submit", "sleep", "--json", "--wait"))
	var eb contracts.ErrorBody
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &eb), "--json prints the error body: %q", te.stdout)
	require.Equal(t, contracts.CodeGlobalCap, eb.Error.Code)
	require.Equal(t, "global", eb.Error.Limit)

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitFailed, te.run("get", testID))
	require.Contains(t, te.stderr.String(), "sluice get: no such job (HTTP 404 not_found)")

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitFailed, te.run("stats", "--json"))
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &eb))
	require.Equal(t, "http_502", eb.Error.Code)
	require.Contains(t, te.stderr.String(), "Bad Gateway: <html>bad gateway</html> (HTTP 502)")

	te = newTestEnv("http://127.0.0.1:1", false, nil)
	require.Equal(t, ExitFailed, te.run("ls"))
	require.Contains(t, te.stderr.String(), "cannot reach the server at http://127.0.0.1:1")
}

func TestRunSendsToken(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, contracts.Stats{Counts: map[contracts.JobState]int{}})
	})
	te := newTestEnv("http://127.0.0.1:1", false, map[string]string{"SLUICE_TOKEN": "from-env"})
	require.Equal(t, ExitOK, te.run("--url", f.srv.URL, "stats"), te.stderr.String())
	te = newTestEnv(f.srv.URL, false, map[string]string{"SLUICE_TOKEN": "from-env"})
	require.Equal(t, ExitOK, te.run("stats", "--token", "from-flag"))
	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("stats"))
	reqs := f.sent("/v1/stats")
	require.Len(t, reqs, 3)
	require.Equal(t, "Bearer from-env", reqs[0].Header.Get("Authorization"))
	require.Equal(t, "Bearer from-flag", reqs[1].Header.Get("Authorization"))
	require.Empty(t, reqs[2].Header.Values("Authorization"))
}

func TestRunGetAndLs(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	job := testJob(contracts.StateFailed)
	job.Error = "handler: exit status 3"
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		data, _ := json.Marshal(job)
		// A field this client does not know survives --json.
		_, _ = w.Write(append(data[:len(data)-1], []byte(`,"future":true}`)...))
	})
	f.handle("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		page := contracts.JobPage{Jobs: []contracts.Job{job}}
		if r.URL.Query().Get("cursor") == "" {
			page.NextCursor = "c2"
		}
		writeTestJSON(w, 200, page)
	})

	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("get", testID), "get exits 0 for a failed job: it exists")
	out := te.stdout.String()
	require.Contains(t, out, "state:      failed")
	require.Contains(t, out, "error:      handler: exit status 3")

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("get", "--json", testID))
	require.Contains(t, te.stdout.String(), `"future":true`)

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("ls", "--state", "failed", "--kind", "sleep", "--limit", "1"))
	require.Contains(t, te.stdout.String(), "ID ")
	require.Contains(t, te.stdout.String(), testID)
	require.Contains(t, te.stderr.String(), "more: sluice ls --cursor c2")
	q := f.sent("/v1/jobs")[0].URL.Query()
	require.Equal(t, "failed", q.Get("state"))
	require.Equal(t, "sleep", q.Get("kind"))
	require.Equal(t, "1", q.Get("limit"))

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("ls", "--all", "--json"))
	var page contracts.JobPage
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &page))
	require.Len(t, page.Jobs, 2, "--all follows next_cursor")
	require.Empty(t, page.NextCursor)
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "running":
			j := testJob(contracts.StateRunning)
			j.CancelRequested = true
			writeTestJSON(w, http.StatusAccepted, j)
		case "pending":
			writeTestJSON(w, http.StatusAccepted, testJob(contracts.StateCancelled))
		default:
			writeTestError(w, http.StatusConflict, contracts.CodeConflict, "job already succeeded, it cannot be cancelled")
		}
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateSucceeded))
	})

	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("cancel", "running"))
	require.Equal(t, "running (cancel requested)\n", te.stdout.String())

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitOK, te.run("cancel", "pending"))
	require.Equal(t, "cancelled\n", te.stdout.String())

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitFailed, te.run("cancel", "done"))
	require.Contains(t, te.stderr.String(), "sluice cancel: job done already succeeded; there is nothing to cancel")

	te = newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitFailed, te.run("cancel", "done", "--json"))
	var eb contracts.ErrorBody
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &eb))
	require.Equal(t, contracts.CodeConflict, eb.Error.Code)
}

func TestRunWatchJSONLines(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w,
			sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StateRunning)},
			progressEvent("2", 40, "x"),
			stateEvent("3", contracts.StateCancelled, 1, "cancelled: cancelled by request"))
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateCancelled))
	})
	te := newTestEnv(f.srv.URL, false, nil)
	require.Equal(t, ExitCancelled, te.run("watch", testID, "--json"))
	lines := strings.Split(strings.TrimSpace(te.stdout.String()), "\n")
	require.Len(t, lines, 3)
	var types []string
	for _, l := range lines {
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(l), &ev))
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{"snapshot", "progress", "state"}, types)
}

func TestRunSubmitWaitOnTerminal(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.handle("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusAccepted, testJob(contracts.StatePending))
	})
	f.handle("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeStream(t, w,
			sseEvent{id: "1", typ: contracts.EventSnapshot, data: testJob(contracts.StatePending)},
			stateEvent("2", contracts.StateRunning, 1, ""),
			progressEvent("3", 50, "1s of 2s"),
			stateEvent("4", contracts.StateSucceeded, 1, ""))
	})
	f.handle("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, testJob(contracts.StateSucceeded))
	})
	te := newTestEnv(f.srv.URL, true, nil)
	require.Equal(t, ExitOK, te.run("submit", "sleep", "--wait"))
	out := te.stdout.String()
	require.True(t, strings.HasPrefix(out, testID+"\n"), out)
	require.Contains(t, out, "[############------------]  50%  sleeping: 1s of 2s", "the bar is drawn")
	require.Contains(t, out, "\r\x1b[K", "the bar is redrawn in place")
	require.Regexp(t, `succeeded  attempt 1/3  claim 1  on worker-01  ran 2\.0s\n$`, out, "the bar gives way to the final line")

	// --json: only the final job on stdout, the bar on the terminal's stderr.
	te = newTestEnv(f.srv.URL, true, nil)
	require.Equal(t, ExitOK, te.run("submit", "sleep", "--wait", "--json"))
	var j contracts.Job
	require.NoError(t, json.Unmarshal(te.stdout.Bytes(), &j), te.stdout.String())
	require.Equal(t, contracts.StateSucceeded, j.State)
	require.Contains(t, te.stderr.String(), "50%")
}
