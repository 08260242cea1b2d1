// Package mongo is the MongoDB store.Store driver. It needs nothing but
// single-document atomic operations — findOneAndUpdate, conditional
// updateOne, inserts into a unique index — and no multi-document
// transaction, so it runs on a standalone server, a replica set and on
// FerretDB alike.
//
// # Collections
//
// jobs holds one document per job (see jobDoc), keyed by the job id;
// job_bodies the payload and inputs of those that have them, written
// once before the job (see body.go).
// counters holds one admission counter per scope: "global" and
// "tenant:<name>", each {_id, active, version}. job_counts holds the
// counts of each tenant's jobs by state (statecounts.go).
//
// # Exact admission
//
// Admit first takes a slot with a conditional increment of the global,
// then the tenant's, counter ({_id, active: {$lt: cap}} → $inc active and
// version), then inserts the job. A rejection gives back what it took, and
// so does an insert that fails (a duplicate dedup key, a duplicate id, an
// error). Transition gives the slot back when it moves an active job to a
// final state. Nothing else changes the counters but Reconcile, which
// repairs drift left by crashed processes with a compare-and-set on the
// counter's version (see Reconcile).
//
// Dedup is a sparse unique index on active_key, a field only active jobs with a
// key have: the second insert of an active (tenant, key) fails, and Admit
// answers with the job that holds the key.
//
// # State changes
//
// Every Transition and Heartbeat is one findOneAndUpdate whose filter is
// the compare side ({_id, state, attempt}, and the claim); a miss reads
// the job once more to tell store.ErrNotFound from store.ErrConflict.
//
// # Times
//
// Times are BSON datetimes (UTC, millisecond precision; finer digits are
// cut off on the way in), so that the data reads naturally in any MongoDB
// tool and ranges over them use the indexes. Expired claims and stale
// heartbeats are judged to the millisecond.
//
// # FerretDB
//
// Everything the driver sends also runs on FerretDB v1 (tested with its
// SQLite handler): it uses no partial or TTL index (Purge deletes in
// batches), no projection on findAndModify, and only $match and $group
// with $sum to count. FerretDB is not atomic under concurrent commands,
// though: run production on MongoDB; the tests put FerretDB behind a
// one-command-at-a-time proxy.
//
// # Consistency
//
// Writes use write concern majority with journaling unless the URI says
// otherwise, reads go to the primary, and every call is bounded by the
// store's timeout. Stats reads the counters of jobs by state and the
// admission counters with two queries, so its numbers are each exact but
// not one snapshot.
package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/tally"
)

// Store is the MongoDB implementation of store.Store. It is safe for
// concurrent use, and any number of Stores, in any number of processes,
// may share one database.
type Store struct {
	client *mongo.Client
	db     *mongo.Database
	jobs   *mongo.Collection
	// bodies holds the jobs' payloads and inputs (body.go).
	bodies   *mongo.Collection
	counters *mongo.Collection
	// stateCounts holds the counters of jobs by state (statecounts.go).
	stateCounts *mongo.Collection
	locks       *mongo.Collection
	// staged holds the fan-out admissions in progress (see stage.go).
	staged *mongo.Collection
	// batch is how many children one insert command carries.
	batch    int
	timeout  time.Duration
	grace    time.Duration
	now      func() time.Time
	suspects *suspects
	// sweep is where the orphan bodies' sweep goes on from, sweepLimit
	// how many bodies one sweep looks at (body.go).
	sweep      *bodySweep
	sweepLimit int
	// stateCheck is Reconcile's last check of the counters of jobs by state.
	stateCheck *stateCheck
	// afterCount, when set, runs after Reconcile counted the jobs by
	// state: a test's writes landing during the count.
	afterCount func()
	// tally counts the write commands that succeeded (WriteCounts).
	tally *tally.Tally
}

var _ store.Store = (*Store)(nil)

var _ store.WriteCounter = (*Store)(nil)

// WriteCounts says what the store has written since it was opened: each
// write command the server carried out, by the operation it was for.
// Each command is its own transaction.
func (s *Store) WriteCounts() store.WriteCounts { return s.tally.WriteCounts() }

// Open connects to the MongoDB server (or replica set) of uri, makes sure
// the indexes exist and returns the store. The database is the URI's path
// ("mongodb://host/sluice"), or WithDatabase, or "sluice". Open fails when
// the server does not answer within the timeout.
func Open(ctx context.Context, uri string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cs, err := connstring.ParseAndValidate(uri)
	if err != nil {
		return nil, fmt.Errorf("mongo: open: parse URI: %w", err)
	}
	if cfg.database == "" {
		cfg.database = cs.Database
	}
	if cfg.database == "" {
		cfg.database = DefaultDatabase
	}

	// Defaults first: what the URI sets (w=, journal=) wins.
	journal := true
	wt := new(tally.Tally)
	co := options.Client().
		SetMonitor(newWriteMonitor(wt).monitor()).
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}).
		SetReadPreference(readpref.Primary()).
		SetServerSelectionTimeout(cfg.timeout).
		SetConnectTimeout(cfg.timeout).
		ApplyURI(uri)
	client, err := mongo.Connect(co)
	if err != nil {
		return nil, fmt.Errorf("mongo: open: connect: %w", err)
	}
	// Every read of the store goes to the primary, whatever the URI says:
	// a compare-and-set is judged against what the primary holds.
	db := client.Database(cfg.database, options.Database().SetReadPreference(readpref.Primary()))
	s := &Store{
		client:      client,
		db:          db,
		jobs:        db.Collection(jobsCollection),
		bodies:      db.Collection(bodiesCollection),
		counters:    db.Collection(countersCollection),
		stateCounts: db.Collection(stateCountsCollection),
		stateCheck:  &stateCheck{},
		locks:       db.Collection(locksCollection),
		staged:      db.Collection(stagedCollection),
		batch:       cfg.batch,
		timeout:     cfg.timeout,
		grace:       cfg.grace,
		now:         cfg.now,
		suspects:    newSuspects(),
		sweep:       &bodySweep{},
		sweepLimit:  bodyBatch,
		tally:       wt,
	}
	if err := s.ensureIndexes(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("mongo: open database %s: %w", cfg.database, err)
	}
	if err := s.buildStateCounts(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("mongo: open database %s: %w", cfg.database, err)
	}
	return s, nil
}

// Database is the name of the store's database.
func (s *Store) Database() string { return s.db.Name() }

// Ping checks the primary answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("mongo: ping: %w", err)
	}
	return nil
}

// Close disconnects from the server, waiting up to the timeout for calls
// still running.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.client.Disconnect(ctx); err != nil && !errors.Is(err, mongo.ErrClientDisconnected) {
		return fmt.Errorf("mongo: close: %w", err)
	}
	return nil
}

// call bounds one store call by the store's timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// detached is a context for a step that must run even when the caller's
// context has ended: giving back an admission slot, releasing one after
// the job's final transition. It keeps ctx's values and has its own timeout.
func (s *Store) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
}
