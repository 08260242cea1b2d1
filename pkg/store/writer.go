package store

import "time"

// WriterTimes is how a store's single writer spent its wall time since
// the store was opened: the embedded driver applies every write on one
// goroutine, so the share of the wall time it is busy says how close the
// store is to its bound (MongoDB has no such writer).
type WriterTimes struct {
	// Busy is the wall time the writer spent on transactions: from taking
	// the first request of one to the end of its commit or rollback,
	// waiting for a CPU and for the disk included. The rest of the wall
	// time it waited for a request.
	Busy time.Duration
	// Commit is the part of Busy spent committing: the transaction's
	// pages written to the log and its fsync.
	Commit time.Duration
	// Yield is the part of Busy the writer gave its CPU away before a
	// transaction, to let the requests about to come join it (the
	// embedded driver does so when a lone request follows a commit
	// closely).
	Yield time.Duration
	// Transactions are the transactions the writer ran, committed or not
	// (a read-only request's included).
	Transactions uint64
	// Requests are the requests those transactions carried.
	Requests uint64
}

// Sub is t minus an earlier reading: what the writer did in between.
func (t WriterTimes) Sub(earlier WriterTimes) WriterTimes {
	t.Busy -= earlier.Busy
	t.Commit -= earlier.Commit
	t.Yield -= earlier.Yield
	t.Transactions -= earlier.Transactions
	t.Requests -= earlier.Requests
	return t
}

// WriterTimer is a store with a single writer that times it (the
// embedded driver).
type WriterTimer interface {
	// WriterTimes reads the writer's times so far.
	WriterTimes() WriterTimes
}
