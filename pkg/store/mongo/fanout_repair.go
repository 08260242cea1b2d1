package mongo

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// repairParents puts right what a process that died between two steps of
// a fan-out left behind (see fanout.go), for every active parent, and
// returns how many parents it repaired:
//
//   - only a parent whose counts and cursor have not moved for the grace
//     period (WithReconcileGrace) is looked at: that is what keeps this
//     from racing a child's end that is half-way (such an end moves the
//     counts within milliseconds);
//   - a parent with fewer children than its total, whose admission
//     stopped half-way (no child stored for another grace period, and none
//     released yet), ends failed;
//   - children below the parent's cursor still held are released (the
//     step that releases them may run again at any time: it is
//     idempotent), and only then are the places taken in its window
//     counted, so that the child a dead release took the cursor for fills
//     its place once, not twice;
//   - a parent whose children say more of them ended gets its counts from
//     them, then the places in its window that the lost steps left empty,
//     then its end if every child ended.
func (s *Store) repairParents(ctx context.Context) (int, error) {
	parents, err := s.findDocs(ctx, bson.D{{Key: fWindow, Value: bson.D{{Key: "$gt", Value: 0}}},
		{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}}})
	if err != nil {
		return 0, fmt.Errorf("find active parents: %w", err)
	}
	now := s.now()
	repaired := 0
	for _, p := range parents {
		stored := p.counts()
		if !s.suspects.confirmed("parent:"+p.ID, int64(stored.Finished()), int64(p.ChildrenReleased), now, s.grace) {
			continue
		}
		actual, err := s.childStates(ctx, p.ID)
		if err != nil {
			return repaired, err
		}
		if actual.Total < p.ChildrenTotal {
			// An admission still storing children, or one that stopped
			// half-way: only children that stopped coming for the grace
			// period too end it. None of them was released (that comes
			// after the last is stored), so none ran.
			if s.suspects.confirmed("admit:"+p.ID, int64(actual.Total), 0, now, s.grace) {
				if err := s.abortParent(ctx, p, now); err != nil {
					return repaired, err
				}
				repaired++
			}
			continue
		}
		if err := s.releaseBelow(ctx, p.ID, p.ChildrenReleased, now); err != nil {
			return repaired, fmt.Errorf("release the children of %s: %w", p.ID, err)
		}
		// The places taken are counted only now: a child released just
		// above (its release died after taking the cursor) holds one, and
		// counted before it would leave a place that looks empty, filled
		// again below: one more child running than the window.
		open, err := s.openChildren(ctx, p.ID)
		if err != nil {
			return repaired, err
		}
		gaps := p.fanoutParent().Gaps(open)
		if actual.Finished() == stored.Finished() && gaps == 0 && !actual.Done() {
			continue
		}
		res, err := s.jobs.UpdateOne(ctx, bson.D{{Key: fID, Value: p.ID},
			{Key: fChildrenSucceeded, Value: count(p.ChildrenSucceeded)}, {Key: fChildrenFailed, Value: count(p.ChildrenFailed)},
			{Key: fChildrenCancelled, Value: count(p.ChildrenCancelled)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fChildrenSucceeded, Value: actual.Succeeded},
				{Key: fChildrenFailed, Value: actual.Failed}, {Key: fChildrenCancelled, Value: actual.Cancelled}}}})
		if err != nil {
			return repaired, fmt.Errorf("repair the counts of %s: %w", p.ID, err)
		}
		if res.MatchedCount == 0 {
			continue // it moved after all: the next sweep looks again
		}
		p.ChildrenSucceeded, p.ChildrenFailed, p.ChildrenCancelled = actual.Succeeded, actual.Failed, actual.Cancelled
		for range gaps {
			if err := s.releaseNext(ctx, p, now); err != nil {
				return repaired, err
			}
		}
		if err := s.finishParentIfDone(ctx, p, now); err != nil {
			return repaired, err
		}
		s.suspects.clear("parent:" + p.ID)
		repaired++
	}
	return repaired, nil
}

// count matches a count field that holds n (a zero count may be unset).
func count(n int) any {
	if n == 0 {
		return bson.D{{Key: "$in", Value: bson.A{0, nil}}}
	}
	return n
}

// childStates counts a parent's children, and those that ended by state.
func (s *Store) childStates(ctx context.Context, parent string) (contracts.ChildCounts, error) {
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fParent, Value: parent}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: fID, Value: "$" + fState}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return contracts.ChildCounts{}, fmt.Errorf("count the children of %s: %w", parent, err)
	}
	var rows []struct {
		State string `bson:"_id"`
		N     int    `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return contracts.ChildCounts{}, fmt.Errorf("count the children of %s: %w", parent, err)
	}
	var c contracts.ChildCounts
	for _, r := range rows {
		c.Total += r.N
		switch contracts.JobState(r.State) {
		case contracts.StateSucceeded:
			c.Succeeded = r.N
		case contracts.StateFailed:
			c.Failed = r.N
		case contracts.StateCancelled:
			c.Cancelled = r.N
		}
	}
	return c, nil
}

// openChildren counts a parent's children released that have not ended:
// the places taken in its window.
func (s *Store) openChildren(ctx context.Context, parent string) (int, error) {
	open, err := s.jobs.CountDocuments(ctx, bson.D{{Key: fParent, Value: parent}, {Key: fReleased, Value: true},
		{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}}})
	if err != nil {
		return 0, fmt.Errorf("count the open children of %s: %w", parent, err)
	}
	return int(open), nil
}

// findDocs runs a find on the jobs collection and decodes every document.
func (s *Store) findDocs(ctx context.Context, filter bson.D) ([]jobDoc, error) {
	cur, err := s.jobs.Find(ctx, filter)
	if err != nil {
		return nil, err
	}
	var docs []jobDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	return docs, nil
}
