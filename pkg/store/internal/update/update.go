// Package update is how a store driver without a read-modify-write
// transaction (MongoDB) does store.Store's Update and UpdateEach: read,
// decide, compare-and-set, and again after a miss.
package update

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// maxUpdatePasses bounds the compare-and-set misses ByTransition
// retries before it gives up with store.ErrConflict.
const maxUpdatePasses = 5

// Transitioner is the part of a store ByTransition builds on.
type Transitioner interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
	Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error)
}

// ByTransition is store.Store.Update for a driver without a read-modify-write
// transaction: it reads the job, asks decide, and applies the change as a
// compare-and-set on the state and claim read, reading again and asking
// again after a miss (a few times, then store.ErrConflict).
func ByTransition(ctx context.Context, s Transitioner, id string, decide store.Decide) (contracts.Job, error) {
	for range maxUpdatePasses {
		job, err := s.Get(ctx, id)
		if err != nil {
			return contracts.Job{}, err
		}
		ch, err := decide(job)
		if err != nil {
			return contracts.Job{}, fmt.Errorf("update job %s: %w", id, err)
		}
		out, err := s.Transition(ctx, store.Expect{ID: id, State: job.State, Claim: job.Claim}, ch)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return out, err
	}
	return contracts.Job{}, fmt.Errorf("update job %s: changed under every try: %w", id, store.ErrConflict)
}

// Each is store.Store.UpdateEach for a driver that updates one job at a
// time: each id in turn, through update.
func Each(ctx context.Context, ids []string, decide store.DecideEach,
	update func(ctx context.Context, id string, decide store.Decide) (contracts.Job, error)) []store.Updated {
	out := make([]store.Updated, len(ids))
	for i, id := range ids {
		out[i].Job, out[i].Err = update(ctx, id, func(job contracts.Job) (store.Change, error) { return decide(i, job) })
	}
	return out
}
