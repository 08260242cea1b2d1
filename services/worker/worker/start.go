package worker

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Start heartbeats. An accepted attempt may start its handler only once
// the scheduler confirms it is running on this worker at its claim: the
// claim recorded it so before the offer, and the start heartbeat checks
// that it still holds (a job given back after a lost answer, then claimed
// for another worker, is lost here and never starts twice). The attempts waiting for one are sent together: a few sender
// goroutines each take every attempt queued when they are free, so a burst
// of offers costs a few heartbeat requests (and store writes), not one
// each, while a lone offer still goes out at once.

// startSenders is how many start heartbeats may be in flight at once.
const startSenders = 4

// startHeartbeatTimeout bounds one try of a start heartbeat.
const startHeartbeatTimeout = 2 * time.Second

// startReq is one attempt waiting for its start heartbeat.
type startReq struct {
	lease contracts.Lease
	done  chan error // buffered: the sender never waits for the job
}

// startLoop sends start heartbeats until ctx ends.
func (w *Worker) startLoop(ctx context.Context) {
	for {
		var first startReq
		select {
		case <-ctx.Done():
			return
		case first = <-w.starts:
		}
		batch := []startReq{first}
	more:
		for len(batch) < contracts.MaxLeasesPerHeartbeat {
			select {
			case r := <-w.starts:
				batch = append(batch, r)
			default:
				break more
			}
		}
		leases := make([]contracts.Lease, len(batch))
		for i, r := range batch {
			leases[i] = r.lease
		}
		sent := w.now()
		ack, err := w.requestHeartbeat(ctx, leases, startHeartbeatTimeout)
		if err == nil {
			w.applyAck(leases, ack, sent)
		}
		for _, r := range batch {
			r.done <- err
		}
	}
}

// startHeartbeat has the attempt's lease sent in the next start heartbeat
// and waits for the answer.
func (w *Worker) startHeartbeat(ctx context.Context, l contracts.Lease) error {
	r := startReq{lease: l, done: make(chan error, 1)}
	select {
	case w.starts <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claim has the start heartbeat sent for the attempt and waits, retrying,
// for the scheduler's acknowledgement: once acknowledged the job is
// recorded running, so the handler may start. It reports false when no
// acknowledgement came within the claim wait; when jctx ends first (the
// lease was lost, cancelled, or the worker shuts down) it reports true and
// the caller reads the cause from jctx.
func (w *Worker) claim(jctx context.Context, t *task) bool {
	ctx, cancel := context.WithTimeout(jctx, w.cfg.ClaimWait)
	defer cancel()
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	err := backoff.Retry(func() error { return w.startHeartbeat(ctx, t.lease) }, b)
	return err == nil || jctx.Err() != nil
}
