package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// devSpawner answers the schedulers' scale requests (SLUICE_SCHEDULER_SPAWN=dev) by
// starting one more in-process worker of the stack's built-in kinds, marked
// spawned. Spawned workers leave by their idle timeout and max lifetime
// like any other, so the pool grows with the load and shrinks when idle;
// the schedulers bound how many are live (SLUICE_SCHEDULER_MAX_SPAWNED).
type devSpawner struct {
	cfg worker.Config
	nc  *nats.Conn
	// connect opens a worker's own connection (its own NATS user in token
	// mode), by worker id.
	connect func(id string) (*nats.Conn, jetstream.JetStream, error)

	mu      sync.Mutex
	n       int
	stopped bool
	sub     *nats.Subscription
	workers sync.WaitGroup
}

// start starts a worker for every scale request of a kind the stack's
// workers run; each runs until it leaves or ctx ends. stop ends it all.
func (d *devSpawner) start(ctx context.Context, log func(error, string)) error {
	sub, err := d.nc.Subscribe(contracts.SubjectScaleRequest, func(m *nats.Msg) {
		var req contracts.ScaleRequest
		if json.Unmarshal(m.Data, &req) != nil || !slices.Contains(d.cfg.Kinds, req.Kind) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.stopped {
			return
		}
		w, err := d.newWorkerLocked()
		if err != nil {
			log(err, "spawned worker not started")
			return
		}
		d.workers.Go(func() {
			if err := w.Run(ctx); err != nil {
				log(err, "spawned worker stopped with an error")
			}
		})
	})
	if err != nil {
		return fmt.Errorf("devstack: subscribe %s: %w", contracts.SubjectScaleRequest, err)
	}
	d.sub = sub
	return nil
}

// stop takes no more requests and waits for the spawned workers (they stop
// with the context start was given).
func (d *devSpawner) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	if d.sub != nil {
		_ = d.sub.Unsubscribe()
	}
	d.workers.Wait()
}

// newWorkerLocked builds the next spawned worker on a connection of its
// own. Callers hold mu.
func (d *devSpawner) newWorkerLocked() (*worker.Worker, error) {
	d.n++
	c := d.cfg
	c.WorkerID = fmt.Sprintf("spawned-%02d", d.n)
	c.Spawned = true
	nc, js, err := d.connect(c.WorkerID)
	if err != nil {
		return nil, err
	}
	return worker.New(c, worker.Deps{NC: nc, JS: js, Registry: prometheus.NewRegistry()})
}
