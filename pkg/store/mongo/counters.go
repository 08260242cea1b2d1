package mongo

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Admission counters. One document per scope in the counters collection:
//
//	{_id: "global" | "tenant:<name>", active: <pending + running jobs>, version: <changes so far>}
//	{_id: "items:<name>", active: <the tenant's items in flight>, version: …}
//
// active moves only by single-document $inc — up by one when Admit takes a
// slot, down by one when a job leaves the active states (or an admission
// gives its slot back) — and every such change also bumps version, so that
// Reconcile can repair a counter with a compare-and-set on version without
// racing live admissions.

// The fields of a counter document.
const (
	fActive  = "active"
	fVersion = "version"
)

// counterDoc is one admission counter.
type counterDoc struct {
	Scope   string `bson:"_id"`
	Active  int64  `bson:"active"`
	Version int64  `bson:"version"`
}

// maxSlotTries bounds the rounds of takeSlot when the counter keeps
// changing under it (created, or a slot freed, between two steps).
const maxSlotTries = 16

// errContended says takeSlot gave up after maxSlotTries rounds.
var errContended = errors.New("admission counter kept changing")

// held is what an admitted job holds in the counters while it is active:
// its slots in the global and the tenant's counter, its items in the
// tenant's items counter.
type held struct {
	tenant       string
	slots, items int
}

// heldBy is what job holds.
func heldBy(job contracts.Job) held {
	return held{tenant: job.Tenant, slots: job.Slots(), items: job.HeldItems()}
}

// reserve takes what job holds in each counter within its cap, in the
// order store.Caps.CapChecks lists them (0 = no cap, the counter still
// counts: the global one first). It returns store.Admitted when all are
// taken, or the rejection of the cap that had no room.
//
// When one has no room, what was taken is given back, the later scopes
// first. When taking one fails with an error that may come after the
// server applied it (a cut connection, a timeout: see unapplied), what was
// taken stays taken: giving the global slot back while the tenant's may
// be held would let the tenants' counters together hold more than the
// global cap, and the active slots they add up to (Stats) pass it. Too
// high, the counters only reject a little early until Reconcile lowers
// them; every partial failure of an admission or a release leaves the
// global counter at least the sum of the tenants'.
func (s *Store) reserve(ctx context.Context, caps store.Caps, job contracts.Job) (store.Admission, error) {
	checks := caps.CapChecks(job)
	for i, k := range checks {
		ok, err := s.takeSlot(ctx, k)
		if err == nil && ok {
			continue
		}
		if err != nil && !unapplied(err) {
			return 0, fmt.Errorf("take %s: %w", k.Scope, err)
		}
		for j := i - 1; j >= 0; j-- {
			if gerr := s.giveBack(ctx, checks[j].N, checks[j].Scope); gerr != nil {
				err = errors.Join(err, gerr)
				break // the earlier ones stay taken, as above
			}
		}
		if err != nil {
			return 0, fmt.Errorf("take %s: %w", k.Scope, err)
		}
		return k.Rejection, nil
	}
	return store.Admitted, nil
}

// unapplied reports whether err says for certain that a write was not
// applied: the server answered with an error, or no server could be
// reached to send it to. Any other error (a connection cut after the
// command left, a timeout while it ran) leaves that unknown: the write
// may have been applied, or may still be.
func unapplied(err error) bool {
	var sel topology.ServerSelectionError
	if errors.As(err, &sel) {
		return true
	}
	var se mongo.ServerError // a network error is one too, as a label
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// releaseHeld gives back what an active job held (see held), in one
// ordered bulk write: the tenant's counters first, the global one last.
func (s *Store) releaseHeld(ctx context.Context, h held) error {
	if h.slots <= 0 && h.items <= 0 {
		return nil
	}
	ctx, cancel := s.detached(ctx)
	defer cancel()
	var models []mongo.WriteModel
	add := func(scope string, n int) {
		if n <= 0 {
			return
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fID, Value: scope}, {Key: fActive, Value: bson.D{{Key: "$gte", Value: int64(n)}}}}).
			SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: fActive, Value: int64(-n)}, {Key: fVersion, Value: int64(1)}}}}))
	}
	// The tenant's counters before the global one, in order: a release
	// cut short leaves the global counter the higher (see reserve).
	add(store.ItemsScope(h.tenant), h.items)
	add(store.TenantScope(h.tenant), h.slots)
	add(store.GlobalScope, h.slots)
	if _, err := s.counters.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true)); err != nil {
		return fmt.Errorf("release what tenant %q held: %w", h.tenant, err)
	}
	return nil
}

// takeSlot adds k.N to the counter k.Scope if that keeps it within k.Limit
// (k.Fits; whatever it is when there is no limit), in one atomic step, and
// reports whether it did. A missing counter is created holding these slots.
//
// The conditional update misses both when the counter is full and when it
// does not exist yet; a read tells which. A full counter is a rejection at
// the moment of that read; a missing one is inserted, and if another
// admission inserted it first, the next round updates it.
func (s *Store) takeSlot(ctx context.Context, k store.CapCheck) (bool, error) {
	scope, limit, n := k.Scope, k.Limit, k.N
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: fActive, Value: int64(n)}, {Key: fVersion, Value: int64(1)}}}}
	if limit <= 0 {
		// No cap: count anyway, creating the counter if need be. MongoDB
		// retries an upsert by _id that lost a race to create the document;
		// FerretDB may not, so a duplicate key runs the update once more.
		for range 2 {
			_, err := s.counters.UpdateOne(ctx, bson.D{{Key: fID, Value: scope}}, inc, options.UpdateOne().SetUpsert(true))
			if err == nil {
				return true, nil
			}
			if !mongo.IsDuplicateKeyError(err) {
				return false, err
			}
		}
		return false, errContended
	}
	if !k.Fits(0) {
		return false, nil
	}
	filter := bson.D{{Key: fID, Value: scope}, {Key: fActive, Value: bson.D{{Key: "$lte", Value: int64(limit - n)}}}}
	for range maxSlotTries {
		res, err := s.counters.UpdateOne(ctx, filter, inc)
		if err != nil {
			return false, err
		}
		if res.MatchedCount == 1 {
			return true, nil
		}
		var c counterDoc
		err = s.counters.FindOne(ctx, bson.D{{Key: fID, Value: scope}}).Decode(&c)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			_, err = s.counters.InsertOne(ctx, counterDoc{Scope: scope, Active: int64(n), Version: 1})
			if err == nil {
				return true, nil
			}
			if !mongo.IsDuplicateKeyError(err) {
				return false, err
			}
		case err != nil:
			return false, err
		case !k.Fits(int(c.Active)):
			return false, nil
		}
		// Created or freed meanwhile: try again.
	}
	return false, errContended
}

// giveBack returns n slots to scopes: an admission that took them did not
// insert its job. It runs even when ctx has ended.
func (s *Store) giveBack(ctx context.Context, n int, scopes ...string) error {
	return s.release(ctx, n, scopes...)
}

// release takes n off each scope's active count, in one unordered bulk
// write of single-document updates. It never takes a counter below zero (a
// counter that low has drifted; Reconcile repairs it). It runs even when
// ctx has ended: a slot that is not released stays taken until Reconcile
// finds it.
func (s *Store) release(ctx context.Context, n int, scopes ...string) error {
	if n <= 0 {
		return nil
	}
	ctx, cancel := s.detached(ctx)
	defer cancel()
	dec := bson.D{{Key: "$inc", Value: bson.D{{Key: fActive, Value: int64(-n)}, {Key: fVersion, Value: int64(1)}}}}
	models := make([]mongo.WriteModel, len(scopes))
	for i, scope := range scopes {
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fID, Value: scope}, {Key: fActive, Value: bson.D{{Key: "$gte", Value: int64(n)}}}}).
			SetUpdate(dec)
	}
	if _, err := s.counters.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("release slots %v: %w", scopes, err)
	}
	return nil
}
