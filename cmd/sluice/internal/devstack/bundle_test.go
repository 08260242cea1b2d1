package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// bundle is one running stack and a client for it.
type bundle struct {
	t       *testing.T
	stack   *Stack
	dataDir string
	base    string
	cancel  context.CancelFunc
	done    chan error
}

// testEnv is the configuration every end-to-end test starts from: fast
// retries, heartbeats and staleness so recovery happens in about a second.
func testEnv(dataDir string, extra map[string]string) map[string]string {
	env := map[string]string{
		"SLUICE_DATA_DIR":                       dataDir,
		"SLUICE_HTTP_ADDR":                      "127.0.0.1:0",
		"SLUICE_RETRY_INTERVAL":                 "100ms",
		"SLUICE_GATEWAY_RETRY_AFTER":            "100ms",
		"SLUICE_HEARTBEAT_INTERVAL":             "100ms",
		"SLUICE_STALE_THRESHOLD":                "2s",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS":    "1",
		"SLUICE_SHUTDOWN_TIMEOUT":               "2s",
		"SLUICE_SCHEDULER_CLAIM_TTL":            "5s",
		"SLUICE_LOG_LEVEL":                      "warn",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT":      "0", // these tests submit faster than a client should
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ": "0", // and poll faster (waitFinal: every 10 ms)
		"SLUICE_GATEWAY_RATE_LIMIT_IP":          "0",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// setup starts a fresh stack in its own data dir.
func setup(t *testing.T, o Options, extra map[string]string) *bundle {
	t.Helper()
	return start(t, t.TempDir(), o, extra)
}

// start runs a stack on dataDir until the test ends (or stop is called).
func start(t *testing.T, dataDir string, o Options, extra map[string]string) *bundle {
	t.Helper()
	o.Environ = testEnv(dataDir, extra)
	o.Log = testLog()
	b := run(t, dataDir, o)
	b.waitReady()
	return b
}

// testLog is the stacks' log: nothing, or the console with
// SLUICE_TEST_LOGS set.
func testLog() zerolog.Logger {
	if os.Getenv("SLUICE_TEST_LOGS") != "" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

// run starts a stack of o (its Environ and Log set by the caller) on
// dataDir, with NATS and HTTP on free loopback ports, until the test ends
// (or stop is called). It does not wait for readiness.
func run(t *testing.T, dataDir string, o Options) *bundle {
	t.Helper()
	o.NATSListen = "127.0.0.1:0"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	o.HTTPListener = ln
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		cancel()
		_ = ln.Close()
		require.NoError(t, err)
	}
	b := &bundle{t: t, stack: s, dataDir: dataDir, base: "http://" + s.HTTPAddr, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- s.Run(ctx) }()
	t.Cleanup(b.stop)
	return b
}

// stop shuts the stack down and waits for it.
func (b *bundle) stop() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	b.cancel = nil
	select {
	case err := <-b.done:
		require.NoError(b.t, err)
	case <-time.After(ShutdownGrace):
		b.t.Fatal("stack did not stop")
	}
}

func (b *bundle) waitReady() {
	require.Eventually(b.t, func() bool {
		resp, err := http.Get(b.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "stack never became ready")
	if len(b.stack.Workers) > 0 {
		require.Eventually(b.t, func() bool {
			var st contracts.Stats
			b.getJSON("/v1/stats", &st)
			return len(st.Workers) == len(b.stack.Workers)
		}, 10*time.Second, 20*time.Millisecond, "workers never announced")
	}
}

// api is the public Go client of the bundle's gateway.
func (b *bundle) api() *client.Client {
	b.t.Helper()
	c, err := client.New(b.base)
	require.NoError(b.t, err)
	return c
}

// submit submits a job through the Go client and returns the HTTP status
// and the job.
func (b *bundle) submit(req contracts.SubmitRequest) (int, contracts.Job) {
	b.t.Helper()
	j, created, err := b.api().Submit(context.Background(), req)
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return ce.Status, contracts.Job{}
	case err != nil:
		require.NoError(b.t, err)
	case created:
		return http.StatusAccepted, j
	}
	return http.StatusOK, j
}

// mustSubmit submits and requires a 202.
func (b *bundle) mustSubmit(kind string, payload any) contracts.Job {
	b.t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(b.t, err)
	code, j := b.submit(contracts.SubmitRequest{Kind: kind, Payload: raw})
	require.Equal(b.t, http.StatusAccepted, code)
	return j
}

func (b *bundle) getJSON(path string, v any) int {
	b.t.Helper()
	resp, err := http.Get(b.base + path)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		require.NoError(b.t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp.StatusCode
}

func (b *bundle) job(id string) contracts.Job {
	b.t.Helper()
	j, err := b.api().Get(context.Background(), id)
	require.NoError(b.t, err)
	return j
}

// waitFinal waits for a job to reach a final state and returns it.
func (b *bundle) waitFinal(id string, within time.Duration) contracts.Job {
	b.t.Helper()
	var j contracts.Job
	require.Eventually(b.t, func() bool {
		j = b.job(id)
		return j.State.Final()
	}, within, 10*time.Millisecond, fmt.Sprintf("job %s not final (last seen %s)", id, j.State))
	return j
}

// waitState waits until a job is in state.
func (b *bundle) waitState(id string, state contracts.JobState, within time.Duration) contracts.Job {
	b.t.Helper()
	var j contracts.Job
	require.Eventually(b.t, func() bool {
		j = b.job(id)
		return j.State == state
	}, within, 5*time.Millisecond, fmt.Sprintf("job %s never %s (last seen %s)", id, state, j.State))
	return j
}
