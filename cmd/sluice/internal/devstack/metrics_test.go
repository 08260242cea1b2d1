package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// scrape is one parsed /metrics answer, by family name.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs url and parses the Prometheus text exposition.
func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, url)
	return fams
}

// value sums the series of a family whose labels include labels: counter
// and gauge values, histogram sample counts. ok is false when the family or
// every such series is missing.
func (s scrape) value(name string, labels map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, want := range labels {
			if have[k] != want {
				continue series
			}
		}
		ok = true
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

// metricWant is one series to look for: it must exist, and with grow it
// must have grown between two scrapes.
type metricWant struct {
	name   string
	labels map[string]string
	typ    dto.MetricType
	grow   bool
}

// requireMetrics checks every want on after (and growth against before).
func requireMetrics(t *testing.T, endpoint string, before, after scrape, wants []metricWant) {
	t.Helper()
	for _, w := range wants {
		f := after[w.name]
		require.NotNil(t, f, "%s: family %s missing", endpoint, w.name)
		require.Equal(t, w.typ, f.GetType(), "%s: type of %s", endpoint, w.name)
		got, ok := after.value(w.name, w.labels)
		require.True(t, ok, "%s: series %s%v missing", endpoint, w.name, w.labels)
		if w.grow {
			was, _ := before.value(w.name, w.labels)
			require.Greater(t, got, was, "%s: %s%v did not move", endpoint, w.name, w.labels)
		}
	}
}

// probeURL serves a service's health and metrics probe on a test server.
func probeURL(t *testing.T, p *observe.Probe) string {
	t.Helper()
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// freeAddr is a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// natsSubmitAs submits over the NATS API as tenant (open mode).
func natsSubmitAs(t *testing.T, nc *nats.Conn, tenant string, req contracts.SubmitRequest) contracts.SubmitReply {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	m := &nats.Msg{Subject: contracts.SubjectSubmit, Data: body, Header: nats.Header{}}
	m.Header.Set(contracts.HeaderTenant, tenant)
	res, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var reply contracts.SubmitReply
	require.NoError(t, json.Unmarshal(res.Data, &reply), string(res.Data))
	return reply
}

// submitError posts a job and returns the status and the error body.
func (b *bundle) submitError(req contracts.SubmitRequest) (int, contracts.ErrorDetail) {
	b.t.Helper()
	body, err := json.Marshal(req)
	require.NoError(b.t, err)
	resp, err := http.Post(b.base+"/v1/jobs", "application/json", strings.NewReader(string(body)))
	require.NoError(b.t, err)
	defer resp.Body.Close()
	var e contracts.ErrorBody
	if resp.StatusCode >= 400 {
		require.NoError(b.t, json.NewDecoder(resp.Body).Decode(&e))
	}
	return resp.StatusCode, e.Error
}

// TestMetricsMoveUnderRealWork drives every service through real work —
// jobs that succeed, fail, are cancelled, wait for a slot, miss their
// dispatch deadline, lose their worker to kill -9, join by key, are shed by
// the caps and the rate limits — then scrapes each service's /metrics (the gateway's and the
// stand-alone worker process's over their own HTTP listeners, the
// scheduler's and the reaper's through their probes), parses the text
// exposition and checks that every family exists with its type and that
// the counters and histograms of what happened grew.
func TestMetricsMoveUnderRealWork(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1, SetupWorker: func(_ int, w *worker.Worker) error {
		return w.Handle("fail", func(context.Context, worker.Job) (worker.Result, error) {
			return nil, errors.New("boom")
		})
	}}, map[string]string{
		"SLUICE_MAX_ACTIVE":                      "3",
		"SLUICE_TENANT_MAX_ACTIVE":               "2",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT":       "0.001",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST": "40",
		"SLUICE_GATEWAY_RATE_LIMIT_IP":           "0.001",
		"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST":     "50",
	})
	gatewayURL := b.base + "/metrics"
	schedulerURL := probeURL(t, b.stack.Schedulers[0].Probe())
	reaperURL := probeURL(t, b.stack.Reaper.Probe())
	before := map[string]scrape{
		"gateway":   scrapeMetrics(t, gatewayURL),
		"scheduler": scrapeMetrics(t, schedulerURL),
		"reaper":    scrapeMetrics(t, reaperURL),
	}

	// A stand-alone worker process that sorts first takes a long job, shows
	// it on its own /metrics, and dies with it: the reaper finds the job
	// stale and the scheduler requeues it onto worker-01.
	procAddr := freeAddr(t)
	proc := startWorkerProcess(t, b, "worker-00", "SLUICE_WORKER_HTTP_ADDR="+procAddr)
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 2
	}, 10*time.Second, 20*time.Millisecond)
	long := b.mustSubmit("sleep", map[string]int{"ms": 600_000})
	require.Equal(t, "worker-00", b.waitState(long.ID, contracts.StateRunning, 10*time.Second).Worker)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + procAddr + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the worker process never served /metrics")
	requireMetrics(t, "worker process", scrape{}, scrapeMetrics(t, "http://"+procAddr+"/metrics"), []metricWant{
		{name: "sluice_worker_offers_total", labels: map[string]string{"outcome": "accepted"}, typ: dto.MetricType_COUNTER, grow: true},
		{name: "sluice_worker_offers_total", labels: map[string]string{"outcome": "busy"}, typ: dto.MetricType_COUNTER},
		{name: "sluice_worker_slots_used", labels: map[string]string{"worker_id": "worker-00"}, typ: dto.MetricType_GAUGE, grow: true},
		{name: "sluice_worker_slots_capacity", labels: map[string]string{"worker_id": "worker-00"}, typ: dto.MetricType_GAUGE, grow: true},
		{name: "sluice_worker_jobs_total", labels: map[string]string{"state": "succeeded"}, typ: dto.MetricType_COUNTER},
		{name: "sluice_worker_leases_fenced_total", labels: map[string]string{"reason": "lost"}, typ: dto.MetricType_COUNTER},
		{name: "sluice_worker_heartbeats_total", labels: map[string]string{"outcome": "acked"}, typ: dto.MetricType_COUNTER, grow: true},
		{name: "go_goroutines", typ: dto.MetricType_GAUGE},
	})
	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGKILL))
	_, _ = proc.Process.Wait()
	require.Eventually(t, func() bool {
		j := b.job(long.ID)
		return j.State == contracts.StateRunning && j.Worker == "worker-01"
	}, 30*time.Second, 10*time.Millisecond, "the orphaned job never ran again")

	// The caps: tenant "default" over HTTP (the long job is its first
	// active one), tenant "other" over NATS.
	raw, err := json.Marshal(map[string]int{"ms": 600_000})
	require.NoError(t, err)
	code, keyed := b.submit(contracts.SubmitRequest{Kind: "sleep", Payload: raw, Key: "metrics-long"})
	require.Equal(t, http.StatusAccepted, code) // first with this key
	code, again := b.submit(contracts.SubmitRequest{Kind: "sleep", Payload: raw, Key: "metrics-long"})
	require.Equal(t, http.StatusOK, code, "the same key joins the active job")
	require.Equal(t, keyed.ID, again.ID)
	code, e := b.submitError(contracts.SubmitRequest{Kind: "sleep"})
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "tenant", e.Limit)
	nc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	short, err := json.Marshal(map[string]int{"ms": 1})
	require.NoError(t, err)
	queued := natsSubmitAs(t, nc, "other", contracts.SubmitRequest{Kind: "sleep", Payload: short})
	require.Equal(t, http.StatusAccepted, queued.Status)
	shed := natsSubmitAs(t, nc, "other", contracts.SubmitRequest{Kind: "sleep", Payload: short})
	require.Equal(t, http.StatusTooManyRequests, shed.Status)
	require.Equal(t, "global", shed.Error.Limit)

	// Cancel both long jobs (one runs, one waits); the queued one then runs.
	for _, id := range []string{long.ID, keyed.ID} {
		status, body := b.cancelJob(id)
		require.Equal(t, http.StatusAccepted, status, string(body))
	}
	require.Equal(t, contracts.StateCancelled, b.waitFinal(long.ID, 20*time.Second).State)
	require.Equal(t, contracts.StateCancelled, b.waitFinal(keyed.ID, 20*time.Second).State)
	// Tenant "other"'s job is not readable as "default": ask the store.
	require.Eventually(t, func() bool {
		j, err := b.stack.Store.Get(context.Background(), queued.Job.ID)
		return err == nil && j.State == contracts.StateSucceeded
	}, 20*time.Second, 10*time.Millisecond, "the queued job never succeeded")

	// A handler error, and a kind no worker runs past its dispatch deadline.
	failed := b.mustSubmit("fail", nil)
	code, nobody := b.submit(contracts.SubmitRequest{Kind: "nobody", Deadline: "300ms"})
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, contracts.StateFailed, b.waitFinal(failed.ID, 20*time.Second).State)
	got := b.waitFinal(nobody.ID, 20*time.Second)
	require.Equal(t, contracts.ClassCapacity, contracts.ClassOf(got.Error), got.Error)

	// The rate limits: the tenant's bucket empties first, then the address's.
	limits := map[string]bool{}
	for i := 0; i < 100 && !limits["ip_rate"]; i++ {
		code, e := b.submitError(contracts.SubmitRequest{Kind: "nobody", Deadline: "200ms"})
		if code == http.StatusTooManyRequests && e.Code == contracts.CodeRateLimited {
			limits[e.Limit] = true
		}
	}
	require.Equal(t, map[string]bool{"tenant_rate": true, "ip_rate": true}, limits)

	// Every counter the work above moved, on each service's /metrics.
	counter, gauge, histogram := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	rejected := func(limit string) map[string]string { return map[string]string{"outcome": "rejected", "limit": limit} }
	gatewayWants := []metricWant{
		{name: "sluice_gateway_admissions_total", labels: map[string]string{"outcome": "admitted"}, typ: counter, grow: true},
		{name: "sluice_gateway_admissions_total", labels: map[string]string{"outcome": "joined"}, typ: counter, grow: true},
		{name: "sluice_gateway_admissions_total", labels: rejected("global"), typ: counter, grow: true},
		{name: "sluice_gateway_admissions_total", labels: rejected("tenant"), typ: counter, grow: true},
		{name: "sluice_gateway_admissions_total", labels: rejected("tenant_rate"), typ: counter, grow: true},
		{name: "sluice_gateway_admissions_total", labels: rejected("ip_rate"), typ: counter, grow: true},
		{name: "sluice_gateway_rate_limited_total", labels: map[string]string{"transport": "http", "limit": "ip_rate"}, typ: counter, grow: true},
		{name: "sluice_gateway_active_jobs", labels: map[string]string{"state": "pending"}, typ: gauge},
		{name: "sluice_gateway_active_jobs", labels: map[string]string{"state": "running"}, typ: gauge},
		{name: "sluice_gateway_active_jobs_errors_total", typ: counter},
		{name: "sluice_gateway_http_requests_total", labels: map[string]string{"route": "/v1/jobs", "method": "POST", "code": "202"}, typ: counter, grow: true},
		{name: "sluice_gateway_http_requests_total", labels: map[string]string{"route": "/v1/jobs", "method": "POST", "code": "429"}, typ: counter, grow: true},
		{name: "sluice_gateway_http_requests_total", labels: map[string]string{"route": "/v1/jobs/{id}/cancel", "method": "POST", "code": "202"}, typ: counter, grow: true},
		{name: "sluice_gateway_http_request_duration_seconds", labels: map[string]string{"route": "/v1/jobs", "method": "POST"}, typ: histogram, grow: true},
		{name: "sluice_gateway_due_publish_failures_total", typ: counter},
		{name: "sluice_gateway_nats_replies_refused_total", labels: map[string]string{"subject": contracts.SubjectSubmit}, typ: counter},
		{name: "sluice_gateway_nats_replies_refused_total", labels: map[string]string{"subject": contracts.SubjectSubmitBatch}, typ: counter},
		// The store the gateway shares with the other services here.
		{name: "sluice_store_writes_total", labels: map[string]string{"operation": "admit"}, typ: counter, grow: true},
		{name: "sluice_store_writes_total", labels: map[string]string{"operation": "claim"}, typ: counter, grow: true},
		{name: "sluice_store_writes_total", labels: map[string]string{"operation": "heartbeat"}, typ: counter}, // a claim writes the lease; short jobs renew none
		{name: "sluice_store_writes_total", labels: map[string]string{"operation": "update"}, typ: counter, grow: true},
		{name: "sluice_store_writes_total", labels: map[string]string{"operation": "purge"}, typ: counter},
		{name: "sluice_store_rows_written_total", labels: map[string]string{"operation": "admit"}, typ: counter, grow: true},
		{name: "sluice_store_rows_written_total", labels: map[string]string{"operation": "claim"}, typ: counter, grow: true},
		{name: "sluice_store_rows_written_total", labels: map[string]string{"operation": "heartbeat"}, typ: counter}, // a claim writes the lease; short jobs renew none
		{name: "sluice_store_rows_written_total", labels: map[string]string{"operation": "update"}, typ: counter, grow: true},
		{name: "sluice_store_rows_written_total", labels: map[string]string{"operation": "purge"}, typ: counter},
		{name: "sluice_store_side_rows_written_total", typ: counter, grow: true},
		{name: "sluice_store_commits_total", typ: counter, grow: true},
		// The embedded store's single writer: busy while writes come, and committing.
		{name: "sluice_store_writer_busy_seconds_total", typ: counter, grow: true},
		{name: "sluice_store_writer_commit_seconds_total", typ: counter, grow: true},
	}
	schedulerWants := []metricWant{
		{name: "sluice_scheduler_offers_total", labels: map[string]string{"outcome": "accepted"}, typ: counter, grow: true},
		{name: "sluice_scheduler_queue_wait_seconds", typ: histogram, grow: true},
		{name: "sluice_scheduler_run_duration_seconds", labels: map[string]string{"state": "succeeded"}, typ: histogram, grow: true},
		{name: "sluice_scheduler_run_duration_seconds", labels: map[string]string{"state": "failed"}, typ: histogram, grow: true},
		{name: "sluice_scheduler_run_duration_seconds", labels: map[string]string{"state": "cancelled"}, typ: histogram, grow: true},
		{name: "sluice_scheduler_requeues_total", labels: map[string]string{"reason": "stale", "outcome": "requeued"}, typ: counter, grow: true},
		{name: "sluice_scheduler_capacity_failures_total", typ: counter, grow: true},
		{name: "sluice_scheduler_dispatches_total", labels: map[string]string{"outcome": "dispatched"}, typ: counter, grow: true},
		{name: "sluice_scheduler_results_total", labels: map[string]string{"outcome": "applied"}, typ: counter, grow: true},
		{name: "sluice_scheduler_heartbeat_leases_total", labels: map[string]string{"outcome": "promoted"}, typ: counter}, // only a job given back that its worker had taken
		{name: "sluice_scheduler_worker_evictions_total", typ: counter},
	}
	for _, o := range []string{"busy", "no_responders", "timeout", "refused", "evicted", "error"} {
		schedulerWants = append(schedulerWants, metricWant{name: "sluice_scheduler_offers_total", labels: map[string]string{"outcome": o}, typ: counter})
	}
	for _, r := range [][2]string{{"lost", "redelivered"}, {"timeout", "failed"}, {"shutdown", "requeued"}, {"stale", "failed"}} {
		schedulerWants = append(schedulerWants, metricWant{name: "sluice_scheduler_requeues_total", labels: map[string]string{"reason": r[0], "outcome": r[1]}, typ: counter})
	}
	workerWants := []metricWant{
		{name: "sluice_worker_slots_used", labels: map[string]string{"worker_id": "worker-01"}, typ: gauge},
		{name: "sluice_worker_slots_capacity", labels: map[string]string{"worker_id": "worker-01"}, typ: gauge},
		{name: "sluice_worker_offers_total", labels: map[string]string{"outcome": "accepted"}, typ: counter, grow: true},
		{name: "sluice_worker_jobs_total", labels: map[string]string{"state": "succeeded"}, typ: counter, grow: true},
		{name: "sluice_worker_jobs_total", labels: map[string]string{"state": "failed"}, typ: counter, grow: true},
		{name: "sluice_worker_jobs_total", labels: map[string]string{"state": "cancelled"}, typ: counter, grow: true},
		{name: "sluice_worker_handler_duration_seconds", labels: map[string]string{"kind": "sleep"}, typ: histogram, grow: true},
		{name: "sluice_worker_handler_duration_seconds", labels: map[string]string{"kind": "fail"}, typ: histogram, grow: true},
		{name: "sluice_worker_leases_fenced_total", labels: map[string]string{"reason": "lost"}, typ: counter},
		{name: "sluice_worker_leases_fenced_total", labels: map[string]string{"reason": "unacknowledged"}, typ: counter},
	}
	reaperWants := []metricWant{
		{name: "sluice_reaper_sweep_duration_seconds", typ: histogram, grow: true},
		{name: "sluice_reaper_jobs_found_total", labels: map[string]string{"reason": "stale"}, typ: counter, grow: true},
		{name: "sluice_reaper_requeues_published_total", labels: map[string]string{"reason": "stale"}, typ: counter, grow: true},
		{name: "sluice_reaper_jobs_found_total", labels: map[string]string{"reason": "timeout"}, typ: counter},
		{name: "sluice_reaper_purged_jobs_total", typ: counter},
		{name: "sluice_reaper_admission_drift_repaired_total", typ: counter},
	}

	after := map[string]scrape{
		"gateway":   scrapeMetrics(t, gatewayURL),
		"scheduler": scrapeMetrics(t, schedulerURL),
		"reaper":    scrapeMetrics(t, reaperURL),
	}
	requireMetrics(t, "gateway", before["gateway"], after["gateway"], gatewayWants)
	requireMetrics(t, "scheduler", before["scheduler"], after["scheduler"], schedulerWants)
	requireMetrics(t, "reaper", before["reaper"], after["reaper"], reaperWants)
	// In-process workers have no listener of their own: the stack's
	// registry, served on the gateway's /metrics, holds their series.
	requireMetrics(t, "gateway (workers)", before["gateway"], after["gateway"], workerWants)

	// Names, types and help follow the Prometheus conventions.
	problems, err := testutil.GatherAndLint(b.stack.Registry)
	require.NoError(t, err)
	require.Empty(t, problems, lintReport(problems))

	// A second reaper with a short retention purges the finished jobs.
	rcfg, err := reaper.LoadConfig(testEnv(b.dataDir, map[string]string{"SLUICE_REAPER_RETENTION": "1ms"}))
	require.NoError(t, err)
	rnc, err := nats.Connect(b.stack.NATSURL)
	require.NoError(t, err)
	defer rnc.Close()
	rjs, err := jetstream.New(rnc)
	require.NoError(t, err)
	r2, err := reaper.New(rcfg, reaper.Deps{Store: b.stack.Store, NC: rnc, JS: rjs, Log: b.stack.opts.Log})
	require.NoError(t, err)
	r2URL := probeURL(t, r2.Probe())
	r2Before := scrapeMetrics(t, r2URL)
	_, err = r2.Sweep(context.Background())
	require.NoError(t, err)
	requireMetrics(t, "second reaper", r2Before, scrapeMetrics(t, r2URL), []metricWant{
		{name: "sluice_reaper_purged_jobs_total", typ: counter, grow: true},
		{name: "sluice_reaper_sweep_duration_seconds", typ: histogram, grow: true},
	})
}

// lintReport lists lint problems one per line.
func lintReport(problems []promlint.Problem) string {
	lines := make([]string, 0, len(problems))
	for _, p := range problems {
		lines = append(lines, fmt.Sprintf("%s: %s", p.Metric, p.Text))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
