package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// Progress reports in order. A worker publishes a job's progress reports
// one after another, and NATS delivers them to a subscriber in that order;
// applied by any of several goroutines, an older report could be written
// after a newer one, and the job's stored progress (and its progress
// events) went back (40 % after 60 %). serveOrdered keeps the reports of
// one job on one goroutine, so one scheduler applies them as they were
// sent, while reports of different jobs still go in parallel.

// serveOrdered is serveQueue for fire-and-forget messages whose order
// matters per job: every message whose body names the same job_id is
// handled by the same one of workers goroutines, in arrival order.
func (s *Scheduler) serveOrdered(ctx context.Context, subject string, workers, buffer int, handle func(context.Context, *nats.Msg)) error {
	ch := make(chan *nats.Msg, buffer)
	sub, err := s.deps.NC.ChanQueueSubscribe(subject, contracts.QueueScheduler, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	hctx, cancel := observe.DrainContext(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	lanes := make([]chan *nats.Msg, workers)
	var wg sync.WaitGroup
	for i := range lanes {
		lane := make(chan *nats.Msg, max(buffer/workers, 1))
		lanes[i] = lane
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-lane:
					handle(hctx, m)
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				select {
				case lanes[laneOf(m.Data, workers)] <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	})
	s.watchDropped(ctx, sub, subject)
	_ = sub.Unsubscribe()
	wg.Wait()
	return nil
}

// laneOf is the goroutine, of n, that handles a message about the job
// whose id its JSON body names in job_id; a body without one goes to
// lane 0 (its handler drops it as malformed).
func laneOf(data []byte, n int) int {
	var m struct {
		JobID string `json:"job_id"`
	}
	if n <= 1 || json.Unmarshal(data, &m) != nil || m.JobID == "" {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(m.JobID))
	return int(h.Sum32() % uint32(n))
}
