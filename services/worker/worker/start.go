package worker

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Start heartbeats. An accepted attempt may start its handler only once
// the scheduler confirms it is running on this worker at its claim: the
// claim recorded it so before the offer, and the start heartbeat checks
// that it still holds (a job given back after a lost answer, then claimed
// for another worker, is lost here and never starts twice).
//
// The attempts an offer accepted are queued together, as one batch, right
// after the offer is answered, and a few sender goroutines each take every
// batch queued when they are free: an offer of 256 jobs costs one start
// heartbeat request (and one store read), not one per job goroutine that
// happened to be scheduled before a sender, while a lone offer still goes
// out at once. An attempt whose batch was not acknowledged retries alone,
// with backoff, until the claim wait (counted from the offer) ends.

// startSenders is how many start heartbeats may be in flight at once.
const startSenders = 4

// startHeartbeatTimeout bounds one try of a start heartbeat.
const startHeartbeatTimeout = 2 * time.Second

// startBatch is attempts waiting for one start heartbeat's answer.
type startBatch struct {
	leases []contracts.Lease
	// deadline is when the claim wait of its attempts ends (zero: no
	// bound here; the waiter's context bounds it).
	deadline time.Time
	// expired is closed at deadline (nil: never).
	expired chan struct{}
	timer   *time.Timer
	// done is closed once err is set: nil when the scheduler acknowledged
	// the heartbeat (its answer applied to the leases).
	done chan struct{}
	err  error
}

// startQueue holds the batches no sender has taken yet. Pushing never
// blocks, so an offer's callback never waits for a sender.
type startQueue struct {
	mu      sync.Mutex
	batches []*startBatch
	// ready has a token while batches may be waiting.
	ready chan struct{}
}

func newStartQueue() *startQueue { return &startQueue{ready: make(chan struct{}, 1)} }

// push queues b and wakes a sender.
func (q *startQueue) push(b *startBatch) {
	q.mu.Lock()
	q.batches = append(q.batches, b)
	q.mu.Unlock()
	q.signal()
}

func (q *startQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take removes the oldest queued batches holding at most limit leases in
// all (always at least one batch, when any is queued), and wakes another
// sender when some are left.
func (q *startQueue) take(limit int) []*startBatch {
	q.mu.Lock()
	n, i := 0, 0
	for i < len(q.batches) && (i == 0 || n+len(q.batches[i].leases) <= limit) {
		n += len(q.batches[i].leases)
		i++
	}
	out := make([]*startBatch, i)
	copy(out, q.batches)
	rest := copy(q.batches, q.batches[i:])
	clear(q.batches[rest:])
	q.batches = q.batches[:rest]
	left := rest > 0
	q.mu.Unlock()
	if left {
		q.signal()
	}
	return out
}

// queueStarts queues the start heartbeat of leases, accepted together, in
// batches of at most contracts.MaxLeasesPerHeartbeat, whose claim wait
// ends wait from now, and returns the batch of each lease, in order.
func (w *Worker) queueStarts(leases []contracts.Lease, wait time.Duration) []*startBatch {
	of := make([]*startBatch, len(leases))
	for len(leases) > 0 {
		n := min(len(leases), contracts.MaxLeasesPerHeartbeat)
		b := newStartBatch(leases[:n:n], wait)
		for i := range n {
			of[len(of)-len(leases)+i] = b
		}
		leases = leases[n:]
		w.startQ.push(b)
	}
	return of
}

// newStartBatch is a batch of leases whose claim wait ends wait from now
// (0: not bounded by the batch).
func newStartBatch(leases []contracts.Lease, wait time.Duration) *startBatch {
	b := &startBatch{leases: leases, done: make(chan struct{})}
	if wait > 0 {
		b.deadline = time.Now().Add(wait)
		b.expired = make(chan struct{})
		b.timer = time.AfterFunc(wait, func() { close(b.expired) })
	}
	return b
}

// finish records the answer of b's heartbeat.
func (b *startBatch) finish(err error) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.err = err
	close(b.done)
}

// startLoop sends start heartbeats until ctx ends.
func (w *Worker) startLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.startQ.ready:
		}
		batches := w.startQ.take(contracts.MaxLeasesPerHeartbeat)
		if len(batches) == 0 {
			continue
		}
		leases := batches[0].leases
		if len(batches) > 1 {
			leases = nil
			for _, b := range batches {
				leases = append(leases, b.leases...)
			}
		}
		sent := w.now()
		ack, err := w.requestHeartbeat(ctx, leases, startHeartbeatTimeout)
		if err == nil {
			w.applyAck(leases, ack, sent)
		}
		for _, b := range batches {
			b.finish(err)
		}
	}
}

// startHeartbeat has the attempt's lease sent in the next start heartbeat
// and waits for the answer.
func (w *Worker) startHeartbeat(ctx context.Context, l contracts.Lease) error {
	b := newStartBatch([]contracts.Lease{l}, 0)
	w.startQ.push(b)
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claim waits for the acknowledgement of the attempt's start heartbeat,
// sent with its offer's batch, and retries alone when that one was not
// acknowledged: once acknowledged the job is recorded running, so the
// handler may start. It reports false when no acknowledgement came within
// the claim wait; when jctx ends first (the lease was lost, cancelled, or
// the worker shuts down) it reports true and the caller reads the cause
// from jctx.
func (w *Worker) claim(jctx context.Context, t *task) bool {
	first := t.start
	if first == nil {
		first = w.queueStarts([]contracts.Lease{t.lease}, w.cfg.ClaimWait)[0]
	}
	select {
	case <-first.done:
		if first.err == nil {
			return true
		}
	case <-jctx.Done():
		return true
	case <-first.expired:
		return jctx.Err() != nil
	}
	left := time.Until(first.deadline)
	if left <= 0 {
		return jctx.Err() != nil
	}
	ctx, cancel := context.WithTimeout(jctx, left)
	defer cancel()
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	err := backoff.Retry(func() error { return w.startHeartbeat(ctx, t.lease) }, b)
	return err == nil || jctx.Err() != nil
}
