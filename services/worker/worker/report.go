package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// report publishes the verdict durably.
func (w *Worker) report(deliverCtx context.Context, t *task, v verdict, res Result) {
	id, claim := t.lease.JobID, strconv.FormatInt(t.lease.Claim, 10)
	switch v.report {
	case reportNothing:
		w.m.jobs.WithLabelValues(jobFenced).Inc()
		t.log.Warn().Msg("attempt fenced; reporting nothing")
	case reportRequeue:
		w.m.jobs.WithLabelValues(jobRequeued).Inc()
		rq := contracts.Requeue{JobID: id, Claim: t.lease.Claim, State: contracts.StateRunning, Reason: contracts.ReasonShutdown}
		if w.deliver(deliverCtx, t, contracts.WorkerRequeueSubject(w.cfg.WorkerID), rq, "requeue-"+id+"-"+claim) {
			t.log.Info().Msg("job requeued on shutdown")
		}
	case reportResult:
		w.m.jobs.WithLabelValues(string(v.state)).Inc()
		r := contracts.Result{
			JobID: id, Claim: t.lease.Claim, WorkerID: w.cfg.WorkerID,
			State: v.state, Error: truncateError(v.err), Result: json.RawMessage(res), Permanent: v.permanent,
			Usage: t.usage.Load(),
		}
		if w.deliverResult(deliverCtx, t, r) {
			ev := t.log.Info()
			if v.err != "" {
				ev = ev.Str("error", r.Error)
			}
			ev.Str("state", string(v.state)).Msg("job finished")
		}
	}
}

// publishTimeout bounds one try of a durable publish.
const publishTimeout = 5 * time.Second

// deliver publishes v to a stream subject until JetStream acknowledges it,
// retrying with exponential backoff until ctx (the worker's final shutdown
// deadline) ends. It reports whether v was delivered.
func (w *Worker) deliver(ctx context.Context, t *task, subject string, v any, msgID string) bool {
	log := t.log.With().Str(observe.FieldSubject, subject).Logger()
	return w.publishUntilAcked(ctx, bus.Message{Subject: subject, Value: v, ID: msgID}, 1, log)
}

// publishUntilAcked publishes m until JetStream acknowledges it, retrying
// with exponential backoff until ctx ends, and counts it as n deliveries
// (the results a batch carries). log carries the message's fields.
func (w *Worker) publishUntilAcked(ctx context.Context, m bus.Message, n int, log zerolog.Logger) bool {
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	count := float64(n)
	failures := 0
	err := backoff.RetryNotify(func() error {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		defer cancel()
		return bus.PublishMessage(pctx, w.js, m)
	}, b, func(err error, next time.Duration) {
		failures++
		w.m.deliveries.WithLabelValues(deliveryRetried).Add(count)
		if failures == 1 {
			log.Warn().Err(err).Dur("retry_in", next).Msg("delivery failed; retrying until acknowledged")
		}
	})
	if err != nil {
		w.m.deliveries.WithLabelValues(deliveryAbandoned).Add(count)
		log.Error().Err(err).Int("failures", failures).Msg("not delivered before the shutdown deadline; the reaper will recover the job")
		return false
	}
	w.m.deliveries.WithLabelValues(deliveryDelivered).Add(count)
	if failures > 0 {
		log.Info().Int("failures", failures).Msg("delivered after retries")
	}
	return true
}
