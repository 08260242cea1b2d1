package compose

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	sluiceclient "github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// serviceEnv is the environment compose.yaml gives service, pointed at
// the test's NATS server and, as there is no MongoDB here, at an embedded
// store under dataDir.
func serviceEnv(service, natsURL, dataDir string) map[string]string {
	env := environment(defaultProject.Services[service])
	maps.Copy(env, map[string]string{
		"SLUICE_NATS_URL":            natsURL,
		"SLUICE_STORE":               "",
		"SLUICE_DATA_DIR":            dataDir,
		"SLUICE_HTTP_ADDR":           "127.0.0.1:0",
		"SLUICE_SCHEDULER_HTTP_ADDR": "",
		"SLUICE_WORKER_HTTP_ADDR":    "",
		"SLUICE_REAPER_HTTP_ADDR":    "",
		"SLUICE_SHUTDOWN_TIMEOUT":    "5s",
		"SLUICE_HEARTBEAT_INTERVAL":  "500ms",
		"SLUICE_STALE_THRESHOLD":     "10s",
	})
	return env
}

// TestServicesUnderTheirUsers runs the real services, each logged in as
// its own NATS user on nats.conf with the environment compose.yaml gives
// it (a gateway, two schedulers, two workers, a reaper), and drives jobs
// through every path the permissions must allow: HTTP and NATS submit,
// offers, heartbeats, results, cancel. No service may hit a permission
// violation.
func TestServicesUnderTheirUsers(t *testing.T) {
	t.Parallel()
	// The cluster compose.yaml runs: three nodes of nats.conf, the
	// streams at three replicas (SLUICE_STREAM_REPLICAS from compose.yaml).
	cluster := startNATSCluster(t)
	url := cluster.URL()
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	gcfg, err := gateway.LoadConfig(serviceEnv("gateway", url, dataDir))
	require.NoError(t, err)
	scfg, err := scheduler.LoadConfig(serviceEnv("scheduler", url, dataDir))
	require.NoError(t, err)
	rcfg, err := reaper.LoadConfig(serviceEnv("reaper", url, dataDir))
	require.NoError(t, err)
	st, err := dial.Open(ctx, gcfg.Store)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	var logs []*syncBuffer
	svcCtx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		running.Go(func() {
			if err := f(svcCtx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		})
	}

	gl, gbuf := link(t, url, "gateway")
	logs = append(logs, gbuf)
	gw, err := gateway.New(gcfg, gateway.Deps{Store: st, NC: gl.Conn, JS: gl.JS, Log: zerolog.New(gbuf)})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	run("gateway", func(ctx context.Context) error { return gw.Serve(ctx, ln) })

	var schedulers []*scheduler.Scheduler
	for range 2 {
		l, buf := link(t, url, "scheduler")
		logs = append(logs, buf)
		s, err := scheduler.New(scfg, scheduler.Deps{Store: st, NC: l.Conn, JS: l.JS, Log: zerolog.New(buf)})
		require.NoError(t, err)
		schedulers = append(schedulers, s)
		run("scheduler", s.Run)
	}
	for _, name := range workers[:2] {
		wcfg, err := worker.LoadConfig(serviceEnv(name, url, dataDir)) // its fixed id, its own user
		require.NoError(t, err)
		l, buf := link(t, url, name)
		logs = append(logs, buf)
		w, err := worker.New(wcfg, worker.Deps{NC: l.Conn, JS: l.JS, Log: zerolog.New(buf)})
		require.NoError(t, err)
		run("worker", w.Run)
	}
	rl, rbuf := link(t, url, "reaper")
	logs = append(logs, rbuf)
	rp, err := reaper.New(rcfg, reaper.Deps{Store: st, NC: rl.Conn, JS: rl.JS, Log: zerolog.New(rbuf)})
	require.NoError(t, err)
	run("reaper", rp.Run)
	// Registered after the links: runs before they close.
	t.Cleanup(func() {
		stop()
		running.Wait()
		for _, b := range logs {
			require.Empty(t, b.violations(), "permission violations; warnings and errors:\n%s", b)
		}
	})

	base := "http://" + ln.Addr().String()
	require.Eventually(t, func() bool {
		var s contracts.Stats
		return getJSON(base+"/v1/stats", &s) == http.StatusOK && len(s.Workers) == 2
	}, 10*time.Second, 20*time.Millisecond, "both workers announced")
	// Ready once the cluster has elected its JetStream leader and the
	// streams exist.
	require.Eventually(t, func() bool { return getJSON(base+"/readyz", nil) == http.StatusOK },
		20*time.Second, 50*time.Millisecond, "gateway ready")
	for _, s := range schedulers {
		require.Eventually(t, func() bool { return len(s.Probe().Ready(ctx)) == 0 }, 20*time.Second, 50*time.Millisecond, "scheduler ready")
	}
	require.Empty(t, rp.Probe().Ready(ctx))

	// Submitted over HTTP: pending → running → succeeded.
	job := submitHTTP(t, base, `{"kind":"sleep","payload":{"ms":20}}`)
	waitState(t, base, job.ID, contracts.StateSucceeded)

	// Submitted over NATS by the "client" user, as tenant "client" (the
	// gateway answers only in the tenant's inbox, the user's own).
	caller := connect(t, url, "client")
	req := &nats.Msg{Subject: contracts.SubjectSubmit, Data: []byte(`{"kind":"sleep","payload":{"ms":20}}`), Header: nats.Header{}}
	req.Header.Set(contracts.HeaderTenant, "client")
	msg, err := caller.nc.RequestMsgWithContext(ctx, req)
	require.NoError(t, err)
	var reply contracts.SubmitReply
	require.NoError(t, json.Unmarshal(msg.Data, &reply))
	require.Equal(t, http.StatusAccepted, reply.Status, string(msg.Data))
	require.Equal(t, "client", reply.Job.Tenant)
	// Over HTTP, open mode is the default tenant: the store shows it.
	require.Eventually(t, func() bool {
		j, err := st.Get(ctx, reply.Job.ID)
		return err == nil && j.State == contracts.StateSucceeded
	}, 10*time.Second, 10*time.Millisecond, "job %s never succeeded", reply.Job.ID)
	require.Empty(t, caller.violations(t))

	// Cancelled while running: the gateway tells the worker.
	job = submitHTTP(t, base, `{"kind":"sleep","payload":{"ms":60000}}`)
	waitState(t, base, job.ID, contracts.StateRunning)
	c, err := sluiceclient.New(base)
	require.NoError(t, err)
	_, err = c.Cancel(ctx, job.ID)
	require.NoError(t, err)
	waitState(t, base, job.ID, contracts.StateCancelled)

	// The reaper sweeps under its user (requeues nothing here).
	_, err = rp.Sweep(ctx)
	require.NoError(t, err)

	// The job stream is on all three nodes; with one of them down, jobs
	// still run (its clients move to the others).
	info, err := jobStreamInfo(ctx, gl)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
	cluster.Stop(1)
	job = submitHTTP(t, base, `{"kind":"sleep","payload":{"ms":20}}`)
	waitState(t, base, job.ID, contracts.StateSucceeded)
	cluster.Start(1)
	job = submitHTTP(t, base, `{"kind":"sleep","payload":{"ms":20}}`)
	waitState(t, base, job.ID, contracts.StateSucceeded)
}

// jobStreamInfo reads the job stream's info through l.
func jobStreamInfo(ctx context.Context, l *bus.Link) (*jetstream.StreamInfo, error) {
	s, err := l.JS.Stream(ctx, contracts.StreamName)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

func submitHTTP(t *testing.T, base, body string) contracts.Job {
	t.Helper()
	var req contracts.SubmitRequest
	require.NoError(t, json.Unmarshal([]byte(body), &req))
	c, err := sluiceclient.New(base)
	require.NoError(t, err)
	j, created, err := c.Submit(t.Context(), req)
	require.NoError(t, err)
	require.True(t, created)
	return j
}

func waitState(t *testing.T, base, id string, want contracts.JobState) {
	t.Helper()
	c, err := sluiceclient.New(base)
	require.NoError(t, err)
	var j contracts.Job
	require.Eventually(t, func() bool {
		j, err = c.Get(t.Context(), id)
		return err == nil && j.State == want
	}, 10*time.Second, 10*time.Millisecond, "job %s: want %s, last seen %+v", id, want, &j)
}

// getJSON GETs url and decodes a 200 answer into v (when not nil).
func getJSON(url string, v any) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if json.NewDecoder(bytes.NewReader(b)).Decode(v) != nil {
			return 0
		}
	}
	return resp.StatusCode
}
