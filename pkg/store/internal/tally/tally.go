// Package tally counts what a store driver writes (store.WriteCounts):
// the drivers' side of sluice_store_writes_total and
// sluice_store_rows_written_total.
package tally

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/pkg/store"
)

// ops is the number of store operations (store.WriteOps).
const ops = len(store.WriteCounts{}.Writes)

// JobTable reports whether a table (embedded store) or collection
// (MongoDB) named name holds jobs, so that the rows written there count
// in store.WriteCounts.Rows; every other table's count as SideRows. Both
// drivers keep a job in one row of "jobs".
func JobTable(name string) bool { return name == "jobs" }

// Tally counts writes for a driver (store.WriteCounts); safe for
// concurrent use. Its zero value is ready.
type Tally struct {
	writes   [ops]atomic.Uint64
	rows     [ops]atomic.Uint64
	sideRows atomic.Uint64
	commits  atomic.Uint64
}

// Wrote counts one committed write of op.
func (t *Tally) Wrote(op store.WriteOp) {
	t.writes[known(op)].Add(1)
}

// WroteRows counts n job rows written by committed writes of op
// (store.WriteCounts.Rows).
func (t *Tally) WroteRows(op store.WriteOp, n uint64) {
	if n > 0 {
		t.rows[known(op)].Add(n)
	}
}

// known is op, or WriteOther for a value that names no operation.
func known(op store.WriteOp) store.WriteOp {
	if op < 0 || int(op) >= ops {
		return store.WriteOther
	}
	return op
}

// WroteSide counts n committed side rows (store.WriteCounts.SideRows).
func (t *Tally) WroteSide(n uint64) {
	if n > 0 {
		t.sideRows.Add(n)
	}
}

// Committed counts one committed transaction.
func (t *Tally) Committed() { t.commits.Add(1) }

// Add counts everything c holds: what one transaction wrote, counted
// while it ran and added once it committed.
func (t *Tally) Add(c store.WriteCounts) {
	for i := range c.Writes {
		if c.Writes[i] > 0 {
			t.writes[i].Add(c.Writes[i])
		}
		if c.Rows[i] > 0 {
			t.rows[i].Add(c.Rows[i])
		}
	}
	t.WroteSide(c.SideRows)
	if c.Commits > 0 {
		t.commits.Add(c.Commits)
	}
}

// WriteCounts reads the tally.
func (t *Tally) WriteCounts() store.WriteCounts {
	var c store.WriteCounts
	for i := range c.Writes {
		c.Writes[i] = t.writes[i].Load()
		c.Rows[i] = t.rows[i].Load()
	}
	c.SideRows = t.sideRows.Load()
	c.Commits = t.commits.Load()
	return c
}
