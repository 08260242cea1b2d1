package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Staged fan-out admissions. A parent becomes visible (listed, counted,
// its children dispatchable) only once all its children are in, and an
// admission that fails leaves nothing visible, as on the embedded store.
// Without transactions that takes an order of single-document steps
// (see admitFanout) and a record of each admission in progress, a
// document of the collection staged:
//
//  1. the admission's slots are reserved (conditional $inc), then its
//     staged document inserted;
//  2. its children go in held (out of every query of pending jobs and of
//     the top-level lists), fanoutBatch per command, each batch touching
//     the staged document; a touch that finds it gone (taken back, see 5)
//     stops the admission;
//  3. the parent goes in (visible from here on), then its first window
//     is released;
//  4. the staged document is deleted;
//  5. a process that dies in between leaves the staged document behind:
//     Reconcile (dropAbandoned) takes back one untouched for the grace
//     period (WithReconcileGrace): if the parent is in, it only deletes
//     the document (the parent's own repair finishes the rest); if not,
//     it marks it abandoned (a compare-and-set on its last touch, so a
//     live stager's next touch fails), deletes the held children, then
//     their bodies (and the parent's, if it went in), then the document. The reserved slots are the counters' drift, which
//     Reconcile lowers as it does for any admission that died.
//
// A stager stalled for the whole grace period between its last touch and
// its parent's insert still inserts the parent, with its children gone:
// repairParents then ends that parent failed, as before staging.

// stagedCollection holds the fan-out admissions in progress.
const stagedCollection = "staged"

// Fields of a staged document.
const (
	fTouchedAt = "touched_at"
	fAbandoned = "abandoned"
)

// stagedDoc is a fan-out admission in progress: its parent's id, tenant,
// how many children it stores (whose bodies go with them when it is
// taken back; absent in a document of an older release, whose children's
// bodies the orphan sweep deletes), and when it last stored children.
type stagedDoc struct {
	ID        string    `bson:"_id"`
	Tenant    string    `bson:"tenant"`
	Items     int       `bson:"items,omitempty"`
	TouchedAt time.Time `bson:"touched_at"`
	Abandoned bool      `bson:"abandoned,omitempty"`
}

// errStagingLost is a staged admission that Reconcile took back.
var errStagingLost = errors.New("the staged children were taken back (abandoned)")

// startStaging records the admission of parent with items children as in
// progress.
func (s *Store) startStaging(ctx context.Context, parent contracts.Job, items int) error {
	_, err := s.staged.InsertOne(ctx, stagedDoc{ID: parent.ID, Tenant: parent.Tenant, Items: items, TouchedAt: millis(s.now())})
	if err != nil {
		return fmt.Errorf("record the staging of %s: %w", parent.ID, err)
	}
	return nil
}

// touchStaging records that the admission of parent is still storing
// children: errStagingLost when Reconcile took it back.
func (s *Store) touchStaging(ctx context.Context, parent string) error {
	r, err := s.staged.UpdateOne(ctx, bson.D{{Key: fID, Value: parent}, {Key: fAbandoned, Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fTouchedAt, Value: millis(s.now())}}}})
	if err != nil {
		return fmt.Errorf("touch the staging of %s: %w", parent, err)
	}
	if r.MatchedCount == 0 {
		return errStagingLost
	}
	return nil
}

// endStaging deletes the staged document of parent.
func (s *Store) endStaging(ctx context.Context, parent string) error {
	if _, err := s.staged.DeleteOne(ctx, bson.D{{Key: fID, Value: parent}}); err != nil {
		return fmt.Errorf("end the staging of %s: %w", parent, err)
	}
	return nil
}

// unstage takes back an admission of items children that did not go
// through and whose parent is not in: its held children, then their
// bodies and the parent's, then its staged document, then its reserved
// slots. It runs even when ctx has ended.
func (s *Store) unstage(ctx context.Context, parent contracts.Job, items int) error {
	ctx, cancel := s.detached(ctx)
	defer cancel()
	gone, err := s.jobs.DeleteMany(ctx, bson.D{{Key: fParent, Value: parent.ID}, {Key: fState, Value: stateHeld}})
	if err != nil {
		return fmt.Errorf("delete the staged children of %s: %w", parent.ID, err)
	}
	s.countMove(ctx, parent.Tenant, contracts.StatePending, "", int(gone.DeletedCount))
	if err := s.dropBodies(ctx, append(childIDs(parent.ID, items), parent.ID)); err != nil {
		return fmt.Errorf("take back the staging of %s: %w", parent.ID, err)
	}
	if err := s.endStaging(ctx, parent.ID); err != nil {
		return err
	}
	return s.releaseHeld(ctx, heldBy(parent))
}

// dropAbandoned takes back the staged admissions untouched for the grace
// period (see the top of this file) and returns how many.
func (s *Store) dropAbandoned(ctx context.Context) (int, error) {
	now := s.now()
	cur, err := s.staged.Find(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fTouchedAt, Value: bson.D{{Key: "$lt", Value: millis(now.Add(-s.grace))}}}},
		bson.D{{Key: fAbandoned, Value: true}},
	}}})
	if err != nil {
		return 0, fmt.Errorf("find abandoned stagings: %w", err)
	}
	var found []stagedDoc
	if err := cur.All(ctx, &found); err != nil {
		return 0, fmt.Errorf("find abandoned stagings: %w", err)
	}
	dropped := 0
	for _, d := range found {
		in, err := s.exists(ctx, d.ID)
		if err != nil {
			return dropped, err
		}
		if in {
			// Admitted; the process died before step 4.
			if err := s.endStaging(ctx, d.ID); err != nil {
				return dropped, err
			}
			continue
		}
		if !d.Abandoned {
			r, err := s.staged.UpdateOne(ctx, bson.D{{Key: fID, Value: d.ID}, {Key: fTouchedAt, Value: d.TouchedAt}},
				bson.D{{Key: "$set", Value: bson.D{{Key: fAbandoned, Value: true}}}})
			if err != nil {
				return dropped, fmt.Errorf("take back the staging of %s: %w", d.ID, err)
			}
			if r.MatchedCount == 0 {
				continue // touched meanwhile: alive after all
			}
		}
		gone, err := s.jobs.DeleteMany(ctx, bson.D{{Key: fParent, Value: d.ID}, {Key: fState, Value: stateHeld}})
		if err != nil {
			return dropped, fmt.Errorf("delete the staged children of %s: %w", d.ID, err)
		}
		s.countMove(ctx, d.Tenant, contracts.StatePending, "", int(gone.DeletedCount))
		if err := s.dropBodies(ctx, append(childIDs(d.ID, d.Items), d.ID)); err != nil {
			return dropped, fmt.Errorf("take back the staging of %s: %w", d.ID, err)
		}
		if err := s.endStaging(ctx, d.ID); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return dropped, err
		}
		dropped++
	}
	return dropped, nil
}
