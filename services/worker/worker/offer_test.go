package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func echoHandler(_ context.Context, job worker.Job) (worker.Result, error) {
	return worker.JSON(map[string]any{"id": job.ID, "attempt": job.Claim, "payload": job.Payload})
}

func TestOfferAcceptedWhenFree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(testConfig(t, "w-accept"), map[string]worker.Handler{"echo": echoHandler})

	reply := b.offer("w-accept", spec("job1", "echo", 1, `{"n":7}`))
	require.Equal(t, contracts.OfferAccepted, reply.Status)
	require.Equal(t, 1, reply.InFlight)
	require.Equal(t, 1, reply.Capacity)

	res := b.nextResult()
	require.Equal(t, "job1", res.JobID)
	require.EqualValues(t, 1, res.Claim)
	require.Equal(t, "w-accept", res.WorkerID)
	require.Equal(t, contracts.StateSucceeded, res.State)
	require.Empty(t, res.Error)
	require.JSONEq(t, `{"id":"job1","attempt":1,"payload":{"n":7}}`, string(res.Result))

	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	require.EqualValues(t, 1, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "accepted"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "succeeded"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_slots_capacity", map[string]string{"worker_id": "w-accept"}))
}

func TestOfferBusyAtLimitWithoutQueueing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	var calls atomic.Int64
	r := b.start(testConfig(t, "w-busy"), map[string]worker.Handler{
		"block": func(ctx context.Context, job worker.Job) (worker.Result, error) {
			calls.Add(1)
			return h.handle(ctx, job)
		},
	})

	require.Equal(t, contracts.OfferAccepted, b.offer("w-busy", spec("a", "block", 1, "")).Status)
	h.waitStarted(t)

	start := time.Now()
	reply := b.offer("w-busy", spec("b", "block", 1, ""))
	require.Less(t, time.Since(start), 3*time.Second, "busy must answer at once, not wait for the slot")
	require.Equal(t, contracts.OfferBusy, reply.Status)
	require.Equal(t, 1, reply.InFlight)
	require.Equal(t, 1, reply.Capacity)
	require.Equal(t, 1, r.w.InFlight(), "the slot is still held")
	require.EqualValues(t, 1, calls.Load(), "the busy job was not queued")

	close(h.release)
	require.Equal(t, "a", b.nextResult().JobID)
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	require.EqualValues(t, 1, calls.Load(), "the busy job never ran later")

	// The slot came back: the same job is now accepted.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-busy", spec("b", "block", 1, "")).Status)
	require.Equal(t, "b", b.nextResult().JobID)
	require.EqualValues(t, 1, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "busy"}))
}

func TestOfferRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	cfg := testConfig(t, "w-refuse")
	cfg.MaxConcurrent = 0
	b.start(cfg, map[string]worker.Handler{"block": h.handle})

	// Hold attempt 2 of job "held" for the conflicting-attempt case.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-refuse", spec("held", "block", 2, "")).Status)
	h.waitStarted(t)

	offerOf := func(s contracts.JobSpec) []byte {
		data, err := json.Marshal(contracts.Offer{Job: s})
		require.NoError(t, err)
		return data
	}
	tests := []struct {
		name   string
		data   []byte
		reason string
	}{
		{"unknown kind", offerOf(spec("j1", "nope", 1, "")), `kind "nope" is not handled here`},
		{"not json", []byte("not json"), "malformed offer"},
		{"empty", nil, "malformed offer"},
		{"unknown field", []byte(`{"job":{"id":"j1","kind":"block","attempt":1},"x":1}`), "malformed offer"},
		{"bad job id", offerOf(spec("bad id!", "block", 1, "")), "malformed offer"},
		{"attempt zero", offerOf(spec("j1", "block", 0, "")), "malformed offer"},
		{"bad kind", offerOf(spec("j1", "Block", 1, "")), "malformed offer"},
		{"another attempt held", offerOf(spec("held", "block", 3, "")), "another attempt"},
		{"an older attempt held", offerOf(spec("held", "block", 1, "")), "another attempt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reply := b.offerRaw("w-refuse", tc.data)
			require.Equal(t, contracts.OfferRefused, reply.Status)
			require.Contains(t, reply.Reason, tc.reason)
			require.Equal(t, 1, reply.InFlight)
			require.Equal(t, 0, reply.Capacity)
		})
	}
	close(h.release)
	require.Equal(t, "held", b.nextResult().JobID)
}

func TestDuplicateLeaseIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	var calls atomic.Int64
	cfg := testConfig(t, "w-dup")
	cfg.MaxConcurrent = 2
	r := b.start(cfg, map[string]worker.Handler{
		"block": func(ctx context.Context, job worker.Job) (worker.Result, error) {
			calls.Add(1)
			return h.handle(ctx, job)
		},
	})
	s := spec("dup", "block", 4, "")
	require.Equal(t, contracts.OfferAccepted, b.offer("w-dup", s).Status)
	h.waitStarted(t)
	again := b.offer("w-dup", s)
	require.Equal(t, contracts.OfferAccepted, again.Status)
	require.Equal(t, 1, again.InFlight)
	require.Equal(t, 1, r.w.InFlight())

	close(h.release)
	res := b.nextResult()
	require.Equal(t, "dup", res.JobID)
	require.EqualValues(t, 4, res.Claim)
	b.noResult(300 * time.Millisecond)
	require.EqualValues(t, 1, calls.Load(), "the handler ran once")
}

// TestOfferBatchTakesWhatFits checks an OfferBatch: the worker takes as
// many jobs as it has free slots, in the batch's order, answers busy for
// the rest and refused for what it cannot run, job by job, without
// queuing anything; a job it already runs is accepted again and not
// started twice.
func TestOfferBatchTakesWhatFits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	cfg := testConfig(t, "w-batch")
	cfg.MaxConcurrent = 2
	r := b.start(cfg, map[string]worker.Handler{"block": h.handle})

	batch := contracts.OfferBatch{Jobs: []contracts.JobSpec{
		spec("a", "block", 1, ""), spec("b", "block", 1, ""), spec("c", "block", 1, ""), spec("d", "nope", 1, ""),
	}}
	data, err := json.Marshal(batch)
	require.NoError(t, err)
	reply := b.offerRaw("w-batch", data)
	require.Equal(t, contracts.OfferAccepted, reply.Status)
	require.Equal(t, 2, reply.InFlight)
	require.Equal(t, 2, reply.Capacity)
	var got []contracts.OfferStatus
	for i, res := range reply.Results {
		require.Equal(t, batch.Jobs[i].ID, res.JobID)
		got = append(got, res.Status)
	}
	require.Equal(t, []contracts.OfferStatus{contracts.OfferAccepted, contracts.OfferAccepted, contracts.OfferBusy, contracts.OfferRefused}, got)
	h.waitStarted(t)
	h.waitStarted(t)

	// Offered again while they run: a and b are accepted, not started twice.
	data, err = json.Marshal(contracts.OfferBatch{Jobs: []contracts.JobSpec{spec("a", "block", 1, ""), spec("b", "block", 1, "")}})
	require.NoError(t, err)
	again := b.offerRaw("w-batch", data)
	require.Equal(t, contracts.OfferAccepted, again.Results[0].Status)
	require.Equal(t, contracts.OfferAccepted, again.Results[1].Status)
	require.Equal(t, 2, r.w.InFlight())

	close(h.release)
	ids := []string{b.nextResult().JobID, b.nextResult().JobID}
	require.ElementsMatch(t, []string{"a", "b"}, ids)
	b.noResult(200 * time.Millisecond)
	require.EqualValues(t, 1, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "busy"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "refused"}))
}
