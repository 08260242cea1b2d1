package mongo

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// CancelParent cancels a fan-out parent (see store.Store).
func (s *Store) CancelParent(ctx context.Context, id string, now time.Time, reason string) (contracts.Job, []contracts.Job, error) {
	return contracts.Job{}, nil, fmt.Errorf("mongo: cancel parent %s: fan-out: %w", id, store.ErrUnsupported)
}
