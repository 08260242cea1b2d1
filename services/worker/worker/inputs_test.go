package worker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// pinnedInput is an input served by a local HTTP server, pinned by the
// digest of body.
func pinnedInput(t *testing.T, body string) contracts.InputRef {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256([]byte(body))
	return contracts.InputRef{Name: "h", URI: srv.URL + "/h.txt", SHA256: hex.EncodeToString(sum[:])}
}

// readInput reads a run's input h; overwrite, when set, is then written
// over it the way a hostile handler would (made writable first).
func readInput(job worker.Job, overwrite string) (string, error) {
	path := job.InputPaths["h"]
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if overwrite != "" {
		if err := os.Chmod(path, 0o644); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, []byte(overwrite), 0o644); err != nil {
			return "", err
		}
	}
	return string(data), nil
}

// inputResult is what the test handlers return.
type inputResult struct {
	Read string `json:"read"`
	Path string `json:"path"`
}

func decodeInputResult(t *testing.T, res contracts.Result) inputResult {
	t.Helper()
	require.Equal(t, contracts.StateSucceeded, res.State, res.Error)
	var r inputResult
	require.NoError(t, json.Unmarshal(res.Result, &r), string(res.Result))
	return r
}

// TestAHandlerCannotPoisonAnotherRunsInput: a Go handler that makes its
// InputPaths entry writable and rewrites it changes its own copy only; the
// next run with the same pin reads the pinned bytes. Each run's copy is
// outside the cache and gone when the run ends.
func TestAHandlerCannotPoisonAnotherRunsInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := pinnedInput(t, "original\n")
	cfg := testConfig(t, "w-poison")
	cfg.FetchAllow = []string{"127.0.0.1"} // the inputs are served on loopback
	b.start(cfg, map[string]worker.Handler{
		"poison": func(_ context.Context, job worker.Job) (worker.Result, error) {
			read, err := readInput(job, "poisoned\n")
			if err != nil {
				return nil, err
			}
			return worker.JSON(inputResult{Read: read, Path: job.InputPaths["h"]})
		},
		"read": func(_ context.Context, job worker.Job) (worker.Result, error) {
			read, err := readInput(job, "")
			if err != nil {
				return nil, err
			}
			return worker.JSON(inputResult{Read: read, Path: job.InputPaths["h"]})
		},
	})

	var runs []inputResult
	for i, kind := range []string{"poison", "read", "read"} {
		s := spec(fmt.Sprintf("job-%d", i), kind, 1, "")
		s.Inputs = []contracts.InputRef{in}
		require.Equal(t, contracts.OfferAccepted, b.offer("w-poison", s).Status)
		runs = append(runs, decodeInputResult(t, b.nextResult()))
	}
	for i, r := range runs {
		require.Equal(t, "original\n", r.Read, "run %d read the pinned bytes", i)
	}
	for _, r := range runs {
		require.False(t, strings.HasPrefix(r.Path, cfg.CacheDir), "a run never gets the cached file: %s", r.Path)
		require.True(t, strings.HasPrefix(r.Path, cfg.ScratchDir+"/"), "copies live with the runs: %s", r.Path)
		require.NoFileExists(t, r.Path, "the copy goes with its run")
	}
	require.NotEqual(t, runs[1].Path, runs[2].Path, "each run its own copy")
}

// TestConcurrentRunsOfOnePinKeepTheirOwnInputs: two runs with the same
// pin at once each get their own copy; each writes to its own and reads
// back its own write, never the other's.
func TestConcurrentRunsOfOnePinKeepTheirOwnInputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := pinnedInput(t, "original\n")
	cfg := testConfig(t, "w-both")
	cfg.FetchAllow = []string{"127.0.0.1"} // the inputs are served on loopback
	cfg.MaxConcurrent = 2
	var read sync.WaitGroup
	read.Add(2)
	b.start(cfg, map[string]worker.Handler{
		"both": func(ctx context.Context, job worker.Job) (worker.Result, error) {
			first, err := readInput(job, "written by "+job.ID+"\n")
			if err != nil {
				return nil, err
			}
			read.Done()
			read.Wait() // both runs read their input, then wrote to it
			after, err := os.ReadFile(job.InputPaths["h"])
			if err != nil {
				return nil, err
			}
			return worker.JSON(map[string]string{"first": first, "after": string(after), "path": job.InputPaths["h"]})
		},
	})
	for _, id := range []string{"job-a", "job-b"} {
		s := spec(id, "both", 1, "")
		s.Inputs = []contracts.InputRef{in}
		require.Equal(t, contracts.OfferAccepted, b.offer("w-both", s).Status)
	}
	dirs := map[string]bool{}
	for range 2 {
		res := b.nextResult()
		require.Equal(t, contracts.StateSucceeded, res.State, res.Error)
		var got map[string]string
		require.NoError(t, json.Unmarshal(res.Result, &got))
		require.Equal(t, "original\n", got["first"], res.JobID)
		require.Equal(t, "written by "+res.JobID+"\n", got["after"], "%s reads its own write, not the other run's", res.JobID)
		dirs[filepath.Dir(got["path"])] = true
	}
	require.Len(t, dirs, 2, "two runs, two directories")
}

// TestAnotherTenantCannotReadACachedInputByItsDigest: tenant t1's run
// fetches an input; tenant t2's run names the same digest with a loopback
// URI the worker's rules refuse (an address the allow list does not name)
// and fails input: with the fetch's refusal, its handler never called.
// Named with an allowed URI that serves the same bytes, t2's run gets
// them; and t1 too is refused the loopback URI despite its cached copy.
func TestAnotherTenantCannotReadACachedInputByItsDigest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := pinnedInput(t, "tenant one's reference\n")
	port := in.URI[strings.LastIndex(in.URI, ":")+1 : strings.LastIndex(in.URI, "/")]
	cfg := testConfig(t, "w-tenants")
	cfg.FetchAllow = []string{"127.0.0.1"} // the input is served on 127.0.0.1; ::1 stays refused
	b.start(cfg, map[string]worker.Handler{
		"read": func(_ context.Context, job worker.Job) (worker.Result, error) {
			read, err := readInput(job, "")
			if err != nil {
				return nil, err
			}
			return worker.JSON(inputResult{Read: read, Path: job.InputPaths["h"]})
		},
	})
	run := func(id, tenant, uri string) contracts.Result {
		s := spec(id, "read", 1, "")
		s.Tenant = tenant
		r := in
		r.URI = uri
		s.Inputs = []contracts.InputRef{r}
		require.Equal(t, contracts.OfferAccepted, b.offer("w-tenants", s).Status)
		return b.nextResult()
	}

	require.Equal(t, "tenant one's reference\n", decodeInputResult(t, run("job-t1", "t1", in.URI)).Read)
	loopback := "http://[::1]:" + port + "/h.txt"
	for _, tenant := range []string{"t2", "t1"} {
		res := run("job-loopback-"+tenant, tenant, loopback)
		require.Equal(t, contracts.StateFailed, res.State, tenant)
		require.Equal(t, "input: fetch of "+loopback+" refused: address ::1 is loopback (allow it with SLUICE_WORKER_FETCH_ALLOW)",
			res.Error, "%s: the rule is named", tenant)
		require.Empty(t, res.Result, tenant)
	}
	require.Equal(t, "tenant one's reference\n", decodeInputResult(t, run("job-t2", "t2", in.URI)).Read,
		"an allowed URI: t2's own fetch")
}
