package events

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The events of fan-out parents. A parent changes inside the store, in the
// same transaction as its children (it starts with the first, counts each
// one that ends, ends with the last), so no service handles the parent
// itself. A service that changes children hears of each through its
// Publisher (WithChildren) and, a few times a second, its Parents reads
// every parent touched since and publishes its new state and its progress
// (children finished of the total) on the parent's event subject.

// DefaultInterval is how often a Parents publishes what changed.
const DefaultInterval = 100 * time.Millisecond

// maxSeen bounds the parents a Parents remembers (a parent another
// replica finished is never heard of again).
const maxSeen = 10_000

// Getter reads a job.
type Getter interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
}

// seen is what a Parents last published of a parent.
type seen struct {
	state    contracts.JobState
	finished int
}

// Parents publishes the events of the parents it is told of. It is safe
// for concurrent use.
type Parents struct {
	jobs     Getter
	ev       *Publisher
	interval time.Duration

	mu    sync.Mutex
	dirty map[string]struct{}
	seen  map[string]seen
}

// NewParents returns a Parents reading parents from jobs and publishing to
// ev every interval (0: DefaultInterval).
func NewParents(jobs Getter, ev *Publisher, interval time.Duration) *Parents {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Parents{jobs: jobs, ev: ev, interval: interval, dirty: map[string]struct{}{}, seen: map[string]seen{}}
}

// Touch notes that a child of parent changed.
func (w *Parents) Touch(parent string) {
	w.mu.Lock()
	w.dirty[parent] = struct{}{}
	w.mu.Unlock()
}

// Run publishes what changed every interval until ctx ends, then once more.
func (w *Parents) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			w.Flush(fctx)
			cancel()
			return nil
		case <-t.C:
			w.Flush(ctx)
		}
	}
}

// Flush reads every parent touched since the last flush and publishes its
// state event when its state changed and its progress when more children
// ended. A parent that cannot be read is touched again for the next one.
func (w *Parents) Flush(ctx context.Context) {
	w.mu.Lock()
	ids := make([]string, 0, len(w.dirty))
	for id := range w.dirty {
		ids = append(ids, id)
	}
	clear(w.dirty)
	w.mu.Unlock()
	for _, id := range ids {
		p, err := w.jobs.Get(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				w.Touch(id)
			}
			continue
		}
		if p.Children == nil {
			continue
		}
		w.publish(p)
	}
}

// publish sends what changed of p since it was last published.
func (w *Parents) publish(p contracts.Job) {
	w.mu.Lock()
	last, ok := w.seen[p.ID]
	now := seen{state: p.State, finished: p.Children.Finished()}
	if p.State.Final() {
		delete(w.seen, p.ID)
	} else {
		if len(w.seen) >= maxSeen {
			clear(w.seen)
		}
		w.seen[p.ID] = now
	}
	w.mu.Unlock()
	if !ok || last.finished != now.finished {
		w.ev.Publish(contracts.Event{
			Type: contracts.EventProgress, JobID: p.ID, Tenant: p.Tenant, Kind: p.Kind,
			Attempt: p.Attempt, Claim: p.Claim, Progress: p.Children.Progress(), At: p.UpdatedAt,
		})
	}
	if !ok || last.state != now.state {
		w.ev.State(p)
	}
}
