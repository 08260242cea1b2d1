package mongo

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// activeStates is the $in list of the states counted against the caps.
var activeStates = bson.A{string(contracts.StatePending), string(contracts.StateRunning)}

// Get returns the job with that id, or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (contracts.Job, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	var d jobDoc
	err := s.jobs.FindOne(ctx, bson.D{{Key: fID, Value: id}}).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return contracts.Job{}, fmt.Errorf("mongo: get job %s: %w", id, store.ErrNotFound)
	case err != nil:
		return contracts.Job{}, fmt.Errorf("mongo: get job %s: %w", id, err)
	}
	j := d.job()
	if err := s.countRunning(ctx, &j); err != nil {
		return contracts.Job{}, fmt.Errorf("mongo: get job %s: %w", id, err)
	}
	return j, nil
}

// List returns one page of the jobs q selects, newest first (created_at,
// then id, descending), and the cursor of the next page, "" on the last one.
// A Limit of 0 means store.DefaultListLimit; larger than store.MaxListLimit
// is cut to it.
// A cursor List did not make is store.ErrBadCursor.
//
// The cursor is the position after the page's last job, so jobs admitted
// while a caller pages do not shift the pages still to come.
func (s *Store) List(ctx context.Context, q store.Query) ([]contracts.Job, string, error) {
	limit := store.ListLimit(q.Limit)
	// Top-level jobs have no parent field: {parent: null} matches them.
	filter := bson.D{{Key: fParent, Value: nil}}
	if q.Parent != "" {
		filter[0].Value = q.Parent
	}
	if q.Tenant != "" {
		filter = append(filter, bson.E{Key: fTenant, Value: q.Tenant})
	}
	switch q.State {
	case "":
	case contracts.StatePending:
		filter = append(filter, bson.E{Key: fState, Value: bson.D{{Key: "$in", Value: waitingStates}}})
	default:
		filter = append(filter, bson.E{Key: fState, Value: string(q.State)})
	}
	if q.Kind != "" {
		filter = append(filter, bson.E{Key: fKind, Value: q.Kind})
	}
	if q.Cursor != "" {
		created, id, err := store.DecodeCursor(q.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("mongo: list jobs: %w", err)
		}
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$lt", Value: created}}}},
			bson.D{{Key: fCreatedAt, Value: created}, {Key: fID, Value: bson.D{{Key: "$lt", Value: id}}}},
		}})
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	jobs, err := s.findJobs(ctx, filter, options.Find().
		SetSort(bson.D{{Key: fCreatedAt, Value: -1}, {Key: fID, Value: -1}}).
		SetLimit(int64(limit+1)))
	if err != nil {
		return nil, "", fmt.Errorf("mongo: list jobs: %w", err)
	}
	for i := range jobs {
		if err := s.countRunning(ctx, &jobs[i]); err != nil {
			return nil, "", fmt.Errorf("mongo: list jobs: %w", err)
		}
	}
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, store.EncodeCursor(last.CreatedAt, last.ID), nil
}

// Stats counts jobs by state (every state present, zeros included) and
// active jobs by tenant (only tenants with some): one count per state and
// one aggregation, each exact but not taken at the same instant.
func (s *Store) Stats(ctx context.Context) (store.Counts, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	c := store.Counts{
		ByState:      make(map[contracts.JobState]int, len(contracts.AllStates)),
		TenantActive: map[string]int{},
	}
	for _, st := range contracts.AllStates {
		n, err := s.jobs.CountDocuments(ctx, bson.D{{Key: fState, Value: string(st)}})
		if err != nil {
			return store.Counts{}, fmt.Errorf("mongo: stats: count %s jobs: %w", st, err)
		}
		c.ByState[st] = int(n)
	}
	held, err := s.jobs.CountDocuments(ctx, bson.D{{Key: fState, Value: stateHeld}})
	if err != nil {
		return store.Counts{}, fmt.Errorf("mongo: stats: count held jobs: %w", err)
	}
	c.ByState[contracts.StatePending] += int(held)
	active, err := s.activeByTenant(ctx)
	if err != nil {
		return store.Counts{}, fmt.Errorf("mongo: stats: %w", err)
	}
	for tenant, n := range active {
		c.TenantActive[tenant] = int(n)
	}
	return c, nil
}

// activeByTenant counts the active jobs of each tenant that has some: one
// $match + $group aggregation, covered by the state_tenant index.
func (s *Store) activeByTenant(ctx context.Context) (map[string]int64, error) {
	// Plain jobs hold one slot each; children none; parents (few) their
	// own number, added below.
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}},
			{Key: fParent, Value: nil}, {Key: fWindow, Value: nil}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: fID, Value: "$" + fTenant}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count active jobs per tenant: %w", err)
	}
	var rows []struct {
		Tenant string `bson:"_id"`
		N      int64  `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("count active jobs per tenant: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Tenant] = r.N
	}
	cur, err = s.jobs.Find(ctx, bson.D{{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}},
		{Key: fWindow, Value: bson.D{{Key: "$gt", Value: 0}}}},
		options.Find().SetProjection(bson.D{{Key: fTenant, Value: 1}, {Key: fWindow, Value: 1}, {Key: fChildrenTotal, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("count the slots of active parents: %w", err)
	}
	var parents []jobDoc
	if err := cur.All(ctx, &parents); err != nil {
		return nil, fmt.Errorf("count the slots of active parents: %w", err)
	}
	for _, p := range parents {
		out[p.Tenant] += int64(p.job().Slots())
	}
	return out, nil
}
