package store

import "context"

// WriteOp names what a store write was for: the operation label of the
// store's write counts (sluice_store_writes_total).
type WriteOp int

// The store operations that write. Every write a driver commits counts
// under exactly one of them.
const (
	// WriteAdmit is an admission: Admit, AdmitBatch, and the chunks of a
	// fan-out's children written after their parent.
	WriteAdmit WriteOp = iota
	// WriteClaim is a dispatch claim (Claim).
	WriteClaim
	// WriteHeartbeat is a worker's heartbeat: lease renewals and starts.
	WriteHeartbeat
	// WriteTransition is a compare-and-set on one job (Transition).
	WriteTransition
	// WriteUpdate is a read-decide-write of jobs (Update, UpdateEach):
	// workers' results, retries and requeues.
	WriteUpdate
	// WriteCancel is the cancel of a fan-out parent (CancelParent).
	WriteCancel
	// WritePurge deletes finished jobs (Purge).
	WritePurge
	// WriteReconcile repairs admission counters (Reconcile).
	WriteReconcile
	// WriteOther is any other write (a driver's repairs).
	WriteOther
	writeOps // the number of operations
)

// WriteOps lists every operation, in label order.
func WriteOps() []WriteOp {
	ops := make([]WriteOp, writeOps)
	for i := range ops {
		ops[i] = WriteOp(i)
	}
	return ops
}

// String is the operation's metric label.
func (o WriteOp) String() string {
	switch o {
	case WriteAdmit:
		return "admit"
	case WriteClaim:
		return "claim"
	case WriteHeartbeat:
		return "heartbeat"
	case WriteTransition:
		return "transition"
	case WriteUpdate:
		return "update"
	case WriteCancel:
		return "cancel"
	case WritePurge:
		return "purge"
	case WriteReconcile:
		return "reconcile"
	}
	return "other"
}

// WriteCounts is what a store has written since it was opened: each
// write it committed, by operation (the embedded driver: each write
// request, applied atomically; the MongoDB driver: each write command),
// the rows those writes changed (see Rows), and the transactions that
// carried them (the embedded driver commits several requests in one
// transaction under load; MongoDB: one per command).
//
// A request is not a row: a claim round of 256 jobs is one write and 256
// rows, a heartbeat renewing 100 leases one write and 100 rows. "Store
// writes per completed job" is judged on rows.
type WriteCounts struct {
	// Writes is indexed by WriteOp.
	Writes [writeOps]uint64
	// Rows are the job rows written, indexed by WriteOp: the rows of a
	// job table ("jobs" in both drivers) that committed writes inserted, updated or
	// deleted. A write counts the rows the database wrote, as it reports
	// them (SQLite: each row an INSERT, UPDATE or DELETE touched;
	// MongoDB: documents inserted, modified, upserted or deleted), once
	// it commits: a compare-and-set that missed, a lease kept in memory
	// and a rolled-back transaction count none.
	Rows [writeOps]uint64
	// SideRows are the other rows written: admission counters, counts
	// of jobs by state, key locks. They are not counted by operation (the
	// embedded driver writes the counters of every request of a
	// transaction at once, at its commit).
	SideRows uint64
	// Commits are the transactions committed.
	Commits uint64
}

// Total is the sum of Writes.
func (c WriteCounts) Total() uint64 {
	var n uint64
	for _, w := range c.Writes {
		n += w
	}
	return n
}

// RowsTotal is the sum of Rows: the job rows written.
func (c WriteCounts) RowsTotal() uint64 {
	var n uint64
	for _, r := range c.Rows {
		n += r
	}
	return n
}

// Sub is c minus an earlier reading: what was written in between.
func (c WriteCounts) Sub(earlier WriteCounts) WriteCounts {
	for i := range c.Writes {
		c.Writes[i] -= earlier.Writes[i]
		c.Rows[i] -= earlier.Rows[i]
	}
	c.SideRows -= earlier.SideRows
	c.Commits -= earlier.Commits
	return c
}

// WriteCounter is a store that counts its writes; both drivers are.
type WriteCounter interface {
	// WriteCounts reads the counts so far.
	WriteCounts() WriteCounts
}

type writeOpKey struct{}

// WithWriteOp returns ctx carrying op: the writes a driver makes under it
// count as op (see WriteOpOf). The outermost operation wins: a ctx that
// carries one already is returned as it is, so that an operation made of
// others (Update of a Transition) counts as itself.
func WithWriteOp(ctx context.Context, op WriteOp) context.Context {
	if _, ok := ctx.Value(writeOpKey{}).(WriteOp); ok {
		return ctx
	}
	return context.WithValue(ctx, writeOpKey{}, op)
}

// WriteOpOf is the operation ctx carries (WithWriteOp), or WriteOther.
func WriteOpOf(ctx context.Context) WriteOp {
	if op, ok := ctx.Value(writeOpKey{}).(WriteOp); ok {
		return op
	}
	return WriteOther
}
