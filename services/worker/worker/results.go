package worker

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// Result delivery. A finished attempt's result must be in the stream
// (JetStream acknowledged it) before the worker forgets the attempt. The
// results that finish while a delivery is in flight go together in the
// next one, as one contracts.ResultBatch: a few sender goroutines each
// take every result waiting when they are free (as many as one message
// holds), so a busy worker pays one stream write per batch, while a lone
// result still goes out at once, as a plain Result.

// resultSenders is how many result deliveries may be in flight at once.
const resultSenders = 4

// batchEnvelope is what a batch adds around its results, with room to spare.
const batchEnvelope = 64

// resultReq is one result waiting for its delivery.
type resultReq struct {
	res  contracts.Result
	data []byte    // res encoded
	done chan bool // buffered: true once delivered
}

// resultLoop delivers results until loopCtx ends; a delivery retries until
// JetStream acknowledges it or deliverCtx (the shutdown deadline) ends.
func (w *Worker) resultLoop(loopCtx, deliverCtx context.Context) {
	var carry *resultReq // taken but too large for the last batch
	for {
		var first resultReq
		if carry != nil {
			first, carry = *carry, nil
		} else {
			select {
			case <-loopCtx.Done():
				return
			case first = <-w.results:
			}
		}
		batch := []resultReq{first}
		size, limit := batchEnvelope+len(first.data), w.maxMessageBytes()
	more:
		for len(batch) < contracts.MaxResultsPerBatch {
			select {
			case r := <-w.results:
				if size+len(r.data)+1 > limit {
					carry = &r
					break more
				}
				batch = append(batch, r)
				size += len(r.data) + 1
			default:
				break more
			}
		}
		ok := w.deliverBatch(deliverCtx, batch)
		for _, r := range batch {
			r.done <- ok
		}
	}
}

// deliverResult has res delivered with the next batch and reports whether
// it was (false when the shutdown deadline came first).
func (w *Worker) deliverResult(deliverCtx context.Context, t *task, res contracts.Result) bool {
	data, err := json.Marshal(res)
	if err != nil {
		t.log.Error().Err(err).Msg("result not encoded; the reaper will recover the job")
		return false
	}
	r := resultReq{res: res, data: data, done: make(chan bool, 1)}
	select {
	case w.results <- r:
	case <-deliverCtx.Done():
		w.m.deliveries.WithLabelValues(deliveryAbandoned).Inc()
		t.log.Error().Msg("result not delivered before the shutdown deadline; the reaper will recover the job")
		return false
	}
	select {
	case ok := <-r.done:
		return ok
	case <-deliverCtx.Done():
		return false
	}
}

// deliverBatch publishes a batch until JetStream acknowledges it, retrying
// with exponential backoff until ctx ends. The message id is the batch's
// first attempt and size, so a retried publish JetStream already stored
// is dropped as a duplicate.
func (w *Worker) deliverBatch(ctx context.Context, batch []resultReq) bool {
	first := batch[0].res
	m := bus.Message{Subject: contracts.ResultSubject(w.cfg.WorkerID), Data: batch[0].data,
		ID: "result-" + first.JobID + "-" + strconv.FormatInt(first.Claim, 10)}
	if len(batch) > 1 {
		items := make([][]byte, len(batch))
		for i, r := range batch {
			items[i] = r.data
		}
		m.Data = contracts.EncodeResultBatch(items)
		m.ID += "-" + strconv.Itoa(len(batch))
	}
	log := w.log.With().Str(observe.FieldSubject, m.Subject).Str(observe.FieldJobID, first.JobID).
		Int("results", len(batch)).Logger()
	return w.publishUntilAcked(ctx, m, len(batch), log)
}

// maxMessageBytes is the largest message the connection sends.
func (w *Worker) maxMessageBytes() int {
	if limit := int(w.nc.MaxPayload()); limit > 0 {
		return limit
	}
	return 1 << 20
}
