package scheduler

import (
	"context"
	"encoding/json"
	"hash/fnv"

	"github.com/nats-io/nats.go"
)

// Progress reports in order. A worker publishes a job's progress reports
// one after another, and NATS delivers them to a subscriber in that order;
// applied by any of several goroutines, an older report could be written
// after a newer one, and the job's stored progress (and its progress
// events) went back (40 % after 60 %). serveQueue with laneOf keeps the
// reports of one job on one goroutine, so one scheduler applies them as
// they were sent, while reports of different jobs still go in parallel.

// route moves each message of in to lanes[lane(body, len(lanes))], in
// arrival order, until ctx ends.
func route(ctx context.Context, in <-chan *nats.Msg, lanes []chan *nats.Msg, lane func([]byte, int) int) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			select {
			case lanes[lane(m.Data, len(lanes))] <- m:
			case <-ctx.Done():
				return
			}
		}
	}
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
