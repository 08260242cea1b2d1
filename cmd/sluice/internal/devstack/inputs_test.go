package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestInputFetchRefused: as a tenant, a job whose input points at the
// worker's own network (an HTTP server on its loopback) or at one of its
// files fails input: after one run, with an error naming the rule, and
// nothing is fetched.
func TestInputFetchRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("internal\n"))
	}))
	defer srv.Close()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_EXEC_ALLOW": "/bin/true"})
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	for uri, want := range map[string]string{
		srv.URL + "/x":       "input: fetch of " + srv.URL + "/x refused: address 127.0.0.1 is loopback (allow it with SLUICE_WORKER_FETCH_ALLOW)",
		"file:///etc/passwd": "input: fetch of file:///etc/passwd refused: only regular files under the file roots of SLUICE_WORKER_FETCH_ALLOW",
	} {
		raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/true"}})
		require.NoError(t, err)
		digest := sum("internal\n")
		if strings.HasPrefix(uri, "file:") {
			digest = sum(string(passwd))
		}
		code, j := b.submit(contracts.SubmitRequest{Kind: "exec", Payload: raw, MaxAttempts: 3,
			Inputs: []contracts.InputRef{{Name: "in", URI: uri, SHA256: digest}}})
		require.Equal(t, http.StatusAccepted, code)
		failed := b.waitFinal(j.ID, 30*time.Second)
		require.Equal(t, contracts.StateFailed, failed.State, uri)
		require.True(t, strings.HasPrefix(failed.Error, want), "%s: %s", uri, failed.Error)
		require.Equal(t, 1, failed.Attempt, "a refusal cannot get better: no retry")
	}
	require.Zero(t, hits.Load(), "nothing reached the worker's loopback")
}

// TestPinnedInputs: an exec job reads its pinned inputs from local
// read-only paths; a wrong digest fails input: after one run; two jobs
// needing one digest fetch it once; "pin" makes the gateway hash a file
// at submit, and the job records the digest.
func TestPinnedInputs(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("ACGT\n"))
	}))
	defer srv.Close()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	dir := t.TempDir()
	local := filepath.Join(dir, "ref.txt")
	require.NoError(t, os.WriteFile(local, []byte("reference v1\n"), 0o644))

	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
		"SLUICE_PIN_ROOTS":                   dir,
		"SLUICE_WORKER_FETCH_ALLOW":          "127.0.0.1," + dir,
	})
	sh := func(inputs []contracts.InputRef) (int, contracts.Job) {
		raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c",
			`cat "$SLUICE_INPUT_READS"; cat "$SLUICE_INPUT_REF" 2>/dev/null; true`}})
		require.NoError(t, err)
		return b.submit(contracts.SubmitRequest{Kind: "exec", Payload: raw, MaxAttempts: 3, Inputs: inputs})
	}
	reads := contracts.InputRef{Name: "reads", URI: srv.URL + "/x.fastq", SHA256: sum("ACGT\n"), Version: "run-7"}

	// Two jobs, one digest: one fetch; each reads it, read-only.
	_, j1 := sh([]contracts.InputRef{reads})
	_, j2 := sh([]contracts.InputRef{reads})
	for _, j := range []contracts.Job{j1, j2} {
		done := b.waitFinal(j.ID, 30*time.Second)
		require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
		require.Equal(t, "ACGT\n", execResult(t, done).Stdout)
		require.Equal(t, []contracts.InputRef{reads}, done.Inputs)
	}
	require.Equal(t, int64(1), hits.Load(), "the cache fetched the shared input once")

	// The gateway pins a file it can read.
	code, pinned := sh([]contracts.InputRef{reads, {Name: "ref", URI: "file://" + local, SHA256: "pin"}})
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, sum("reference v1\n"), pinned.Inputs[1].SHA256, "the job records which version it runs on")
	done := b.waitFinal(pinned.ID, 30*time.Second)
	require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
	require.Equal(t, "ACGT\nreference v1\n", execResult(t, done).Stdout)

	// A wrong digest fails input: after one run.
	_, bad := sh([]contracts.InputRef{{Name: "reads", URI: srv.URL + "/y", SHA256: sum("something else")}})
	failed := b.waitFinal(bad.ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, failed.State)
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(failed.Error), failed.Error)
	require.Contains(t, failed.Error, "pinned")
	require.NotContains(t, failed.Error, sum("ACGT\n"), "the error never tells the digest of what was fetched")
	require.Equal(t, 1, failed.Attempt, "a wrong digest cannot get better: no retry")

	// Malformed inputs are refused at submit.
	for _, in := range [][]contracts.InputRef{
		{{Name: "Reads", URI: srv.URL, SHA256: sum("a")}},
		{{Name: "a", URI: "ftp://x/y", SHA256: sum("a")}},
		{{Name: "a", URI: srv.URL, SHA256: "abc"}},
		{{Name: "a", URI: srv.URL, SHA256: "pin"}},
		{{Name: "a", URI: "file://" + filepath.Join(dir, "missing"), SHA256: "pin"}},
		{{Name: "a", URI: srv.URL, SHA256: sum("a")}, {Name: "a", URI: srv.URL, SHA256: sum("a")}},
	} {
		code, _ := sh(in)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%+v", in)
	}
}

// waitFinalAs waits, as the tenant of c, for a job to reach a final state.
func waitFinalAs(t *testing.T, c *client.Client, id string) contracts.Job {
	t.Helper()
	var j contracts.Job
	require.Eventually(t, func() bool {
		var err error
		j, err = c.Get(context.Background(), id)
		return err == nil && j.State.Final()
	}, 30*time.Second, 10*time.Millisecond, "job %s not final (last seen %s)", id, j.State)
	return j
}

// TestATenantCannotPoisonAnothersPinnedInput: tenant A's exec job makes
// its pinned input writable and rewrites it; tenant B's job with the same
// pin, on the same worker, while A's still runs and after it ended, reads
// the pinned bytes. A sees its own write, in its own copy.
func TestATenantCannotPoisonAnothersPinnedInput(t *testing.T) {
	t.Parallel()
	const original = "reference genome v1\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(original))
	}))
	defer srv.Close()
	sum := sha256.Sum256([]byte(original))
	pin := contracts.InputRef{Name: "h", URI: srv.URL + "/genome.fa", SHA256: hex.EncodeToString(sum[:])}
	marks := sharedDir(t)

	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_EXEC_DIRS":            marks,
		"SLUICE_API_TOKENS":                  dashTenant + ":" + dashToken + ",globex:globex-token",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "2",
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
		"SLUICE_WORKER_FETCH_ALLOW":          "127.0.0.1", // the input is served on loopback
		// The poisoner waits for the test while the others run: a slow
		// heartbeat on a busy machine must not end it stale.
		"SLUICE_STALE_THRESHOLD": "30s",
	})
	acme, err := client.New(b.base, client.WithToken(dashToken))
	require.NoError(t, err)
	globex, err := client.New(b.base, client.WithToken("globex-token"))
	require.NoError(t, err)
	sh := func(c *client.Client, script string) contracts.Job {
		raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", script}})
		require.NoError(t, err)
		return submitAs(t, c, contracts.SubmitRequest{Kind: "exec", Payload: raw, MaxAttempts: 1,
			Inputs: []contracts.InputRef{pin}})
	}

	poisoner := sh(acme, `chmod u+w "$SLUICE_INPUT_H" && echo poisoned > "$SLUICE_INPUT_H" && echo written > `+marks+`/written
		while [ ! -e `+marks+`/go ]; do sleep 0.05; done; cat "$SLUICE_INPUT_H"`)
	readWhenWritten(t, filepath.Join(marks, "written"))

	during := waitFinalAs(t, globex, sh(globex, `cat "$SLUICE_INPUT_H"`).ID)
	require.Equal(t, contracts.StateSucceeded, during.State, during.Error)
	require.Equal(t, original, execResult(t, during).Stdout, "while the poisoner runs")

	require.NoError(t, os.WriteFile(filepath.Join(marks, "go"), nil, 0o644))
	a := waitFinalAs(t, acme, poisoner.ID)
	require.Equal(t, contracts.StateSucceeded, a.State, a.Error)
	require.Equal(t, "poisoned\n", execResult(t, a).Stdout, "the poisoner wrote to its own copy")

	after := waitFinalAs(t, globex, sh(globex, `cat "$SLUICE_INPUT_H"`).ID)
	require.Equal(t, contracts.StateSucceeded, after.State, after.Error)
	require.Equal(t, original, execResult(t, after).Stdout, "after the poisoner ended")
	require.Equal(t, a.Worker, after.Worker, "one worker, one cache")
}

// TestATenantCannotReadAnothersCachedInputByItsDigest: in token mode,
// acme's exec job fetches a file the worker may fetch (on 127.0.0.1);
// globex names the same digest with a loopback URI the worker's rules
// refuse (::1) and its job fails input: with the fetch's refusal, after
// one run, never seeing acme's bytes; acme is refused that URI too,
// cached copy or not. With an allowed URI that serves the same file,
// globex's job fetches it itself and reads it.
func TestATenantCannotReadAnothersCachedInputByItsDigest(t *testing.T) {
	t.Parallel()
	const secret = "acme's private reference\n"
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(secret))
	}))
	defer srv.Close()
	sum := sha256.Sum256([]byte(secret))
	pin := contracts.InputRef{Name: "h", URI: srv.URL + "/ref.txt", SHA256: hex.EncodeToString(sum[:])}
	loopback := pin
	loopback.URI = "http://[::1]:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:] + "/ref.txt"

	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS":         dashTenant + ":" + dashToken + ",globex:globex-token",
		"SLUICE_WORKER_EXEC_ALLOW":  "/bin/sh",
		"SLUICE_WORKER_FETCH_ALLOW": "127.0.0.1", // not ::1
	})
	acme, err := client.New(b.base, client.WithToken(dashToken))
	require.NoError(t, err)
	globex, err := client.New(b.base, client.WithToken("globex-token"))
	require.NoError(t, err)
	sh := func(c *client.Client, in contracts.InputRef) contracts.Job {
		raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", `cat "$SLUICE_INPUT_H"`}})
		require.NoError(t, err)
		return waitFinalAs(t, c, submitAs(t, c, contracts.SubmitRequest{Kind: "exec", Payload: raw, MaxAttempts: 3,
			Inputs: []contracts.InputRef{in}}).ID)
	}
	first := sh(acme, pin)
	require.Equal(t, contracts.StateSucceeded, first.State, first.Error)
	require.Equal(t, secret, execResult(t, first).Stdout)
	require.Equal(t, int64(1), hits.Load())

	for _, c := range []*client.Client{globex, acme} {
		j := sh(c, loopback)
		require.Equal(t, contracts.StateFailed, j.State, j.Error)
		require.Equal(t, "input: fetch of "+loopback.URI+" refused: address ::1 is loopback (allow it with SLUICE_WORKER_FETCH_ALLOW)", j.Error)
		require.Equal(t, 1, j.Attempt, "a refusal cannot get better: no retry")
		require.NotContains(t, string(j.Result), secret)
		require.Equal(t, first.Worker, j.Worker, "one worker, one cache")
	}
	require.Equal(t, int64(1), hits.Load(), "the refused URI reached nothing")

	own := sh(globex, pin)
	require.Equal(t, contracts.StateSucceeded, own.State, own.Error)
	require.Equal(t, secret, execResult(t, own).Stdout)
	require.Equal(t, int64(2), hits.Load(), "globex's own fetch")
}
