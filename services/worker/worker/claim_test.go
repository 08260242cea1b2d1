package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestStartHeartbeatAckedBeforeHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := testConfig(t, "w-claim")
	cfg.HeartbeatInterval = time.Minute // only the start heartbeat can record the job
	cfg.StaleThreshold = 3 * time.Minute
	b.start(cfg, map[string]worker.Handler{
		"check": func(_ context.Context, job worker.Job) (worker.Result, error) {
			if n := b.sched.ackedCount(job.Lease()); n < 1 {
				return nil, errors.New("handler started before the start heartbeat was acknowledged")
			}
			return worker.JSON("ran after the claim")
		},
	})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-claim", spec("c1", "check", 3, "")).Status)
	res := b.nextResult()
	require.Equal(t, contracts.StateSucceeded, res.State, res.Error)
	require.Equal(t, 1, b.sched.heartbeatsFor(contracts.Lease{JobID: "c1", Claim: 3}))
}

func TestLostStartAckNeverRunsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := contracts.Lease{JobID: "lost1", Claim: 1}
	b.sched.setAnswer(lostFor(l))
	var calls atomic.Int64
	r := b.start(testConfig(t, "w-lost-start"), map[string]worker.Handler{
		"count": func(context.Context, worker.Job) (worker.Result, error) {
			calls.Add(1)
			return nil, nil
		},
	})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-lost-start", spec("lost1", "count", 1, "")).Status)
	require.Eventually(t, func() bool { return b.sched.heartbeatsFor(l) >= 1 && r.w.InFlight() == 0 },
		waitFor, 5*time.Millisecond, "the slot was not freed")
	b.noResult(300 * time.Millisecond)
	require.Zero(t, calls.Load(), "the handler ran for a lost lease")

	// The slot is free again for another job.
	b.sched.setAnswer(nil)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-lost-start", spec("next", "count", 1, "")).Status)
	require.Equal(t, "next", b.nextResult().JobID)
	require.EqualValues(t, 1, calls.Load())
}

func TestNoStartAckNeverRunsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sched.setAnswer(func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) { return contracts.HeartbeatAck{}, false })
	var calls atomic.Int64
	cfg := testConfig(t, "w-no-ack")
	cfg.HeartbeatInterval = time.Minute
	cfg.StaleThreshold = 3 * time.Minute
	cfg.ClaimWait = 300 * time.Millisecond
	r := b.start(cfg, map[string]worker.Handler{
		"count": func(context.Context, worker.Job) (worker.Result, error) {
			calls.Add(1)
			return nil, nil
		},
	})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-no-ack", spec("silent", "count", 1, "")).Status)
	l := contracts.Lease{JobID: "silent", Claim: 1}
	require.Eventually(t, func() bool { return b.sched.heartbeatsFor(l) >= 1 && r.w.InFlight() == 0 },
		waitFor, 5*time.Millisecond, "the slot was not freed")
	b.noResult(200 * time.Millisecond)
	require.Zero(t, calls.Load(), "the handler ran without an acknowledged claim")
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "unclaimed"}))
}

// TestOfferBatchStartsInOneHeartbeat checks that the jobs one offer
// accepted are confirmed by one start heartbeat carrying all their leases,
// not by one request per job goroutine, and that every handler starts only
// after that acknowledgement; a batch that is not acknowledged is retried
// job by job, and the jobs still run.
func TestOfferBatchStartsInOneHeartbeat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		firstLost bool // the first start heartbeat gets no answer
	}{
		{name: "acknowledged"},
		{name: "first unanswered", firstLost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := "w-start-batch-" + map[bool]string{false: "ack", true: "retry"}[tc.firstLost]
			cfg := testConfig(t, id)
			cfg.MaxConcurrent = 64
			cfg.HeartbeatInterval = time.Minute // only start heartbeats are sent
			cfg.StaleThreshold = 3 * time.Minute
			if tc.firstLost {
				var n atomic.Int64
				b.sched.setAnswer(func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
					return contracts.HeartbeatAck{}, n.Add(1) > 1
				})
			}
			b.start(cfg, map[string]worker.Handler{
				"check": func(_ context.Context, job worker.Job) (worker.Result, error) {
					if n := b.sched.ackedCount(job.Lease()); n < 1 {
						return nil, errors.New("handler started before the start heartbeat was acknowledged")
					}
					return nil, nil
				},
			})
			var batch contracts.OfferBatch
			for i := range 48 {
				batch.Jobs = append(batch.Jobs, spec(fmt.Sprintf("j%02d", i), "check", 1, ""))
			}
			data, err := json.Marshal(batch)
			require.NoError(t, err)
			reply := b.offerRaw(id, data)
			require.Len(t, reply.Results, len(batch.Jobs))
			for _, r := range reply.Results {
				require.Equal(t, contracts.OfferAccepted, r.Status)
			}
			for range batch.Jobs {
				res := b.nextResult()
				require.Equal(t, contracts.StateSucceeded, res.State, res.Error)
			}
			hbs := b.sched.heartbeatsSoFar()
			require.NotEmpty(t, hbs)
			require.Len(t, hbs[0].Leases, len(batch.Jobs), "the offer's start heartbeat carried every accepted lease")
			if !tc.firstLost {
				require.Len(t, hbs, 1, "one start heartbeat for the whole offer")
			}
		})
	}
}
