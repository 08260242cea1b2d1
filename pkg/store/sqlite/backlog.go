package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// backlogQuery counts up to ?3 ready jobs of kind ?1 at ?2 holding no
// claim, and the oldest creation among them: a bounded range of the ready
// queue's index.
const backlogQuery = `SELECT count(*), min(created_at) FROM (
	SELECT created_at FROM jobs INDEXED BY jobs_ready_queue
	WHERE state = 'pending' AND claim_until IS NULL AND held = 0 AND kind = ?1
		AND (next_dispatch_at IS NULL OR next_dispatch_at <= ?2)
	LIMIT ?3)`

// Backlog counts the ready jobs of kind waiting for a slot (see
// store.Store).
func (s *Store) Backlog(ctx context.Context, kind string, now time.Time, limit int) (int, time.Time, error) {
	var (
		n      int
		oldest sql.NullInt64
	)
	if err := s.r.QueryRowContext(ctx, backlogQuery, kind, now.UnixNano(), limit).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlite: backlog of %q: %w", kind, err)
	}
	if !oldest.Valid {
		return n, time.Time{}, nil
	}
	return n, fromNanos(oldest.Int64), nil
}
