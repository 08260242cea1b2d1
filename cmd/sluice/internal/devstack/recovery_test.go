package devstack

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// workerName is the name the worker processes run under: this test
// binary, started under it, is the worker command (see TestMain).
const workerName = "worker"

// workerBinary is the real worker service for the crash tests: a link
// named worker to this test binary, which TestMain runs as the worker
// command (service.Main of worker.Binary, as services/worker does) instead
// of the tests. Nothing is built for it: it is the worker's code compiled
// once with the tests, with the race detector when the tests have it.
var workerBinary string

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == workerName {
		service.Main(worker.Binary()) // exits with 1 on an error
		os.Exit(0)
	}
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // no process tests: nothing to link
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBinary = filepath.Join(dir, workerName)
	if err := os.Symlink(exe, workerBinary); err != nil {
		fmt.Fprintf(os.Stderr, "link the worker: %v\n", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startWorkerProcess runs the real worker binary against the stack's NATS
// server, with extra environment entries ("KEY=value"), and kills it (by
// pid) when the test ends. Its data directory (scratch and cache) is the
// stack's own, so processes of parallel tests never share a worker lock;
// what it printed is logged if the test fails.
func startWorkerProcess(t *testing.T, b *bundle, id string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	if testing.Short() {
		t.Skip("a real worker process: not run with -short (make test runs it)")
	}
	cmd := exec.Command(workerBinary)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"SLUICE_DATA_DIR=" + b.dataDir,
		"SLUICE_NATS_URL=" + b.stack.NATSURL,
		"SLUICE_WORKER_ID=" + id,
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS=1",
		"SLUICE_HEARTBEAT_INTERVAL=100ms",
		"SLUICE_STALE_THRESHOLD=2s",
		"SLUICE_LOG_LEVEL=warn",
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd.Stderr = logFile
	if os.Getenv("SLUICE_TEST_LOGS") != "" {
		cmd.Stderr = os.Stderr
	}
	require.NoError(t, cmd.Start())
	_ = logFile.Close() // the process has its own copy
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		_, _ = cmd.Process.Wait()
		if out, _ := os.ReadFile(logPath); t.Failed() && len(out) > 0 {
			t.Logf("worker process %s printed:\n%s", id, out)
		}
	})
	return cmd
}

// TestOrphanRecovery kills a worker process mid-job: the reaper finds the
// job stale, the scheduler requeues it, it completes on another worker, and
// a late result from the dead attempt changes nothing.
func TestOrphanRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil) // in-process worker-01
	proc := startWorkerProcess(t, b, "worker-00")
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 2
	}, 10*time.Second, 20*time.Millisecond)

	// worker-00 sorts first, so it gets the job.
	j := b.mustSubmit("sleep", map[string]int{"ms": 1500})
	running := b.waitState(j.ID, contracts.StateRunning, 5*time.Second)
	require.Equal(t, "worker-00", running.Worker)

	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGKILL))
	_, _ = proc.Process.Wait()

	done := b.waitFinal(j.ID, 15*time.Second)
	require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
	require.Equal(t, "worker-01", done.Worker)
	require.Greater(t, done.Claim, running.Claim)
	require.GreaterOrEqual(t, done.Attempt, 2)

	// The dead attempt's result arrives late: it is ignored.
	nc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	late := contracts.Result{JobID: j.ID, Claim: running.Claim, WorkerID: "worker-00",
		State: contracts.StateFailed, Error: contracts.JobError(contracts.ClassHandler, "late")}
	require.NoError(t, bus.Publish(context.Background(), js, contracts.ResultSubject(late.WorkerID), late, ""))
	// And a heartbeat for it is told the lease is lost.
	ack := heartbeat(t, nc, "worker-00", contracts.Lease{JobID: j.ID, Claim: running.Claim})
	require.Equal(t, []contracts.Lease{{JobID: j.ID, Claim: running.Claim}}, ack.Lost)
	require.Eventually(t, func() bool {
		// The late result has been consumed once the consumer has nothing pending.
		info, err := js.Consumer(context.Background(), contracts.StreamName, contracts.ConsumerResult)
		if err != nil {
			return false
		}
		ci, err := info.Info(context.Background())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	}, 5*time.Second, 10*time.Millisecond)
	after := b.job(j.ID)
	require.Equal(t, contracts.StateSucceeded, after.State)
	require.Equal(t, done.Claim, after.Claim)
	require.Empty(t, after.Error)
}

func heartbeat(t *testing.T, nc *nats.Conn, workerID string, leases ...contracts.Lease) contracts.HeartbeatAck {
	t.Helper()
	data, err := json.Marshal(contracts.Heartbeat{WorkerID: workerID, Leases: leases})
	require.NoError(t, err)
	msg, err := nc.Request(contracts.HeartbeatSubject(workerID), data, 2*time.Second)
	require.NoError(t, err)
	ack, err := contracts.DecodeHeartbeatAck(msg.Data)
	require.NoError(t, err)
	return ack
}

// TestStreamLossLosesNoJob deletes the JetStream stream while jobs wait for
// a worker: the store is the truth, so every job still completes.
func TestStreamLossLosesNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, map[string]string{"SLUICE_RETRY_INTERVAL": "200ms"})
	var ids []string
	for range 20 {
		ids = append(ids, b.mustSubmit("sleep", map[string]int{"ms": 1}).ID)
	}
	nc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(context.Background(), contracts.StreamName))

	// Now a worker shows up.
	runWorker(t, b, "worker-late")
	for _, id := range ids {
		j := b.waitFinal(id, 30*time.Second)
		require.Equal(t, contracts.StateSucceeded, j.State, j.Error)
	}
}

// runWorker starts one more in-process worker on its own connection.
func runWorker(t *testing.T, b *bundle, id string) {
	t.Helper()
	nc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg, err := worker.LoadConfig(testEnv(b.dataDir, map[string]string{"SLUICE_WORKER_ID": id}))
	require.NoError(t, err)
	w, err := worker.New(cfg, worker.Deps{NC: nc, JS: js, Log: b.stack.opts.Log})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		nc.Close()
	})
}

// TestRestartKeepsPendingJobs stops the whole stack with jobs pending and
// starts it again on the same data dir: every job is still there and runs.
func TestRestartKeepsPendingJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := start(t, dir, Options{Workers: -1}, nil)
	var ids []string
	for range 10 {
		ids = append(ids, first.mustSubmit("sleep", map[string]int{"ms": 1}).ID)
	}
	first.stop()

	second := start(t, dir, Options{Workers: 2}, nil)
	for _, id := range ids {
		j := second.waitFinal(id, 30*time.Second)
		require.Equal(t, contracts.StateSucceeded, j.State, j.Error)
	}
}

// TestExecDiesWithItsWorker kills a worker process running an exec job: the
// job's process dies with it (it does not run on beside the attempt the
// reaper hands to another worker).
func TestExecDiesWithItsWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, nil)
	shared := sharedDir(t)
	proc := startWorkerProcess(t, b, "worker-00", "SLUICE_WORKER_EXEC_ALLOW=/bin/sh", "SLUICE_WORKER_EXEC_DIRS="+shared)
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 1
	}, 10*time.Second, 20*time.Millisecond)

	pidFile := filepath.Join(shared, "job.pid")
	j := b.mustSubmit("exec", map[string]any{
		"argv":    []string{"/bin/sh", "-c", "echo $$ > " + pidFile + "; exec sleep 300"},
		"timeout": "10m",
	})
	b.waitState(j.ID, contracts.StateRunning, 10*time.Second)
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	}, 10*time.Second, 10*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.True(t, alive(pid))

	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGKILL))
	_, _ = proc.Process.Wait()
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond,
		"the exec job's process %d outlived its killed worker", pid)
}
