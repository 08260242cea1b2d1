package mongo

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The collections.
const (
	jobsCollection     = "jobs"
	countersCollection = "counters"
)

// index is one secondary index of a collection and why it exists.
type index struct {
	name   string
	keys   bson.D
	unique bool
	sparse bool
}

// jobIndexes are the jobs collection's secondary indexes. The hot paths
// (Get, Transition, Heartbeat, the counters) go by _id and need none.
//
// No partial and no TTL index: FerretDB has neither. Sparse is honoured by
// MongoDB; FerretDB ignores the option, but its SQLite indexes skip missing
// fields in unique checks all the same.
var jobIndexes = []index{
	// Admit: looks up the tenant's active job by dedup key, and the unique
	// constraint makes a second active (tenant, key) insert fail. Sparse:
	// only active jobs with a key have the field.
	{name: "active_key_unique", keys: bson.D{{Key: fActiveKey, Value: 1}}, unique: true, sparse: true},
	// List with no tenant or state filter: newest first.
	{name: "created", keys: bson.D{{Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}},
	// List of one tenant (with or without a state or kind filter).
	{name: "tenant_created", keys: bson.D{{Key: fTenant, Value: 1}, {Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}},
	// List of one state; Stats' count per state uses its prefix.
	{name: "state_created", keys: bson.D{{Key: fState, Value: 1}, {Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}},
	// Stats and Reconcile: active jobs per tenant, covered by the index.
	{name: "state_tenant", keys: bson.D{{Key: fState, Value: 1}, {Key: fTenant, Value: 1}}},
	// Stale: running jobs by last heartbeat (and those with none).
	{name: "state_heartbeat", keys: bson.D{{Key: fState, Value: 1}, {Key: fHeartbeatAt, Value: 1}}},
	// Stale: running jobs by start time (hard max runtime, and jobs with no
	// heartbeat yet).
	{name: "state_started", keys: bson.D{{Key: fState, Value: 1}, {Key: fStartedAt, Value: 1}}},
	// Stale: pending jobs whose dispatch time has long passed.
	{name: "state_dispatch", keys: bson.D{{Key: fState, Value: 1}, {Key: fNextDispatchAt, Value: 1}}},
	// Claim: the jobs running on a worker, which bound what a claim gives
	// it (store.Slots).
	{name: "state_worker", keys: bson.D{{Key: fState, Value: 1}, {Key: fWorker, Value: 1}}},
	// Claim: the ready queue of each kind in ready order.
	{name: "ready", keys: bson.D{{Key: fState, Value: 1}, {Key: fKind, Value: 1}, {Key: fPriority, Value: -1}, {Key: fFairAt, Value: 1}, {Key: fID, Value: 1}}},
	// Claim: the jobs holding a concurrency key's slots. Sparse: only jobs
	// with a key have it.
	{name: "concurrency_key", keys: bson.D{{Key: fConcurrencyKey, Value: 1}, {Key: fTenant, Value: 1}, {Key: fState, Value: 1}}, sparse: true},
	// The dispatch deadline sweep.
	{name: "state_deadline", keys: bson.D{{Key: fState, Value: 1}, {Key: fDispatchDeadline, Value: 1}}},
	// Fan-out: top-level lists (parent unset) and a parent's children in
	// list order (they share its created_at), all or by state.
	{name: "parent_created", keys: bson.D{{Key: fParent, Value: 1}, {Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}},
	// A tenant's top-level list (what the API lists), without scanning
	// past the children of its fan-outs, which share their parent's
	// created_at.
	{name: "tenant_parent_created", keys: bson.D{{Key: fTenant, Value: 1}, {Key: fParent, Value: 1}, {Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}},
	{name: "parent_state", keys: bson.D{{Key: fParent, Value: 1}, {Key: fState, Value: 1}, {Key: fID, Value: 1}}},
	// Purge: finished jobs, oldest first. Sparse: only finished jobs have it.
	{name: "finished", keys: bson.D{{Key: fFinishedAt, Value: 1}}, sparse: true},
}

// ensureIndexes creates the indexes that are missing, one createIndexes
// command per index: FerretDB builds indexes one at a time, and an error
// then names the index that failed. Creating an index that exists with the
// same keys and options is a no-op, so every Open runs this.
func (s *Store) ensureIndexes(ctx context.Context) error {
	if err := s.ensure(ctx, s.jobs, jobIndexes); err != nil {
		return err
	}
	return s.ensure(ctx, s.bodies, bodyIndexes)
}

// ensure creates the indexes of coll that are missing.
func (s *Store) ensure(ctx context.Context, coll *mongo.Collection, indexes []index) error {
	for _, ix := range indexes {
		opts := options.Index().SetName(ix.name)
		if ix.unique {
			opts.SetUnique(true)
		}
		if ix.sparse {
			opts.SetSparse(true)
		}
		cctx, cancel := s.call(ctx)
		_, err := coll.Indexes().CreateOne(cctx, mongo.IndexModel{Keys: ix.keys, Options: opts})
		cancel()
		if err != nil {
			return fmt.Errorf("create index %s.%s: %w", coll.Name(), ix.name, err)
		}
	}
	return nil
}
