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
	return s.get(ctx, id, true)
}

// get is Get, with the job's body when cold is set (else without payload
// and inputs: see body.go).
func (s *Store) get(ctx context.Context, id string, cold bool) (contracts.Job, error) {
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
	if cold {
		if j, err = s.withBody(ctx, d); err != nil {
			if in, xerr := s.exists(ctx, id); xerr == nil && !in {
				// Purged between the two reads.
				return contracts.Job{}, fmt.Errorf("mongo: get job %s: %w", id, store.ErrNotFound)
			}
			return contracts.Job{}, fmt.Errorf("mongo: get job %s: %w", id, err)
		}
	}
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

// activeCensus counts the active jobs by state (held children count as
// pending), the admission slots they hold per tenant and the items they
// hold per tenant (contracts.Job.HeldItems), with one aggregation: plain
// jobs hold one slot and one item, children none, a parent
// contracts.ParentSlots and one item plus one per child. The groups are (state, tenant, has a parent,
// window, items): one per state and tenant for plain jobs and children,
// and few for parents (one per window and size in use).
func (s *Store) activeCensus(ctx context.Context) (store.Counts, map[string]int, error) {
	c := store.Counts{
		ByState:      make(map[contracts.JobState]int, len(contracts.AllStates)),
		TenantActive: map[string]int{},
	}
	for _, st := range contracts.AllStates {
		if st.Active() {
			c.ByState[st] = 0
		}
	}
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fState, Value: bson.D{{Key: "$in", Value: censusStates}}}}}},
		bson.D{{Key: "$addFields", Value: bson.D{{Key: "parent_type", Value: bson.D{{Key: "$type", Value: "$" + fParent}}}}}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: bson.D{{Key: "s", Value: "$" + fState}, {Key: "t", Value: "$" + fTenant},
				{Key: "p", Value: "$parent_type"}, {Key: "w", Value: "$" + fWindow}, {Key: "c", Value: "$" + fChildrenTotal}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	})
	if err != nil {
		return store.Counts{}, nil, fmt.Errorf("count active jobs: %w", err)
	}
	var rows []struct {
		Group struct {
			State  string `bson:"s"`
			Tenant string `bson:"t"`
			Parent string `bson:"p"`
			Window int    `bson:"w"`
			Items  int    `bson:"c"`
		} `bson:"_id"`
		N int `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return store.Counts{}, nil, fmt.Errorf("count active jobs: %w", err)
	}
	items := map[string]int{}
	for _, r := range rows {
		g := r.Group
		st := contracts.JobState(g.State)
		if g.State == stateHeld {
			st = contracts.StatePending
		}
		c.ByState[st] += r.N
		switch {
		case g.Parent != "missing" && g.Parent != "null":
			// A child: its parent holds its slots.
		case g.Window > 0:
			c.TenantActive[g.Tenant] += r.N * contracts.ParentSlots(g.Window, g.Items)
			items[g.Tenant] += r.N * contracts.JobItems(g.Items)
		default:
			c.TenantActive[g.Tenant] += r.N
			items[g.Tenant] += r.N
		}
	}
	for t, n := range c.TenantActive {
		if n == 0 {
			delete(c.TenantActive, t)
		}
	}
	return c, items, nil
}

// censusStates are the stored states of active jobs: held children wait
// for their parent's window.
var censusStates = append(bson.A{stateHeld}, activeStates...)
