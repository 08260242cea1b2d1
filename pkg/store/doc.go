// Package store is the narrow interface between Sluice and the database that
// holds the truth about every job, with the errors its drivers return.
//
// Every state change is a compare-and-set on {id, state, claim}: a driver
// applies a Change only while the job is still where the caller saw it, and
// answers ErrConflict otherwise. Nothing needs a multi-document
// transaction, so the same interface fits the embedded SQLite driver and
// MongoDB (standalone, replica set or FerretDB).
//
// The drivers live in subpackages; storetest is the conformance suite each
// of them must pass.
package store
