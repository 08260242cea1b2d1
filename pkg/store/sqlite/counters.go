package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/store"
)

// The counters of the open write transaction. A group commit runs many
// admissions and finishes in one transaction; each used to read the
// counter rows and write them back on its own (two-thirds of a single
// admission's writer time). The write loop now keeps the rows the
// transaction has read, with what it added to them, and writes each
// changed row once before the commit. Every read of the counters inside
// the transaction goes through it, so admission stays exact; a
// transaction rolled back drops it; the only other writers of the counters
// (Claim's virtual time, Reconcile) keep it in step or flush it first.

// counterRow is one counter row as the open transaction sees it.
type counterRow struct {
	loaded  bool    // active and fair hold what the row held at its first read
	active  int     // as read
	fair    float64 // as read, or as set in this transaction (fairSet)
	delta   int     // active jobs added (or released, negative) in this transaction
	fairSet bool    // fair was set in this transaction
}

// txCounters are the counter rows of the open write transaction. Only the
// write loop touches them.
type txCounters map[string]*counterRow

// counterRowQuery reads one counter row.
const counterRowQuery = `SELECT active, fair_at FROM counters WHERE scope = ?`

// flushCountersQuery writes one counter row's changes: the added active
// count, and the fair-queue clock when ?4 is set.
const flushCountersQuery = `INSERT INTO counters (scope, active, fair_at) VALUES (?1, ?2, ?3)
	ON CONFLICT (scope) DO UPDATE SET active = active + excluded.active,
		fair_at = CASE WHEN ?4 THEN excluded.fair_at ELSE fair_at END`

// row returns scope's row, without reading it.
func (c txCounters) row(scope string) *counterRow {
	r, ok := c[scope]
	if !ok {
		r = &counterRow{}
		c[scope] = r
	}
	return r
}

// counter returns scope's row read in tx (once per transaction).
func (s *Store) counter(ctx context.Context, tx *sql.Tx, scope string) (*counterRow, error) {
	r := s.counters.row(scope)
	if r.loaded {
		return r, nil
	}
	var (
		active int
		fair   float64
	)
	err := tx.StmtContext(ctx, s.ws.counterRow).QueryRowContext(ctx, scope).Scan(&active, &fair)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read counter %s: %w", scope, err)
	}
	r.loaded, r.active = true, active
	if !r.fairSet {
		r.fair = fair
	}
	return r, nil
}

// release frees n admission slots and items items of tenant in the open
// transaction.
func (s *Store) release(tenant string, n, items int) {
	s.counters.row(store.GlobalScope).delta -= n
	s.counters.row(store.TenantScope(tenant)).delta -= n
	s.counters.row(store.ItemsScope(tenant)).delta -= items
}

// flushCounters writes the open transaction's counter changes and leaves
// the rows as they now are in tx.
func (s *Store) flushCounters(ctx context.Context, tx *sql.Tx) error {
	if err := s.flushParents(ctx, tx); err != nil {
		return err
	}
	for scope, r := range s.counters {
		if r.delta == 0 && !r.fairSet {
			continue
		}
		if _, err := tx.StmtContext(ctx, s.ws.flushCounters).ExecContext(ctx, scope, r.delta, r.fair, r.fairSet); err != nil {
			return fmt.Errorf("write counter %s: %w", scope, err)
		}
		r.active += r.delta
		r.delta, r.fairSet = 0, false
	}
	return s.flushStateCounts(ctx, tx)
}

// resetCounters forgets the open transaction's counter rows (a new
// transaction, or one rolled back).
func (s *Store) resetCounters() {
	if s.counters == nil {
		s.counters = txCounters{}
	}
	clear(s.counters)
	clear(s.parents)
	clear(s.states)
}
