package mongo

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/stale"
)

// Batch sizes used when a caller gives none.
const (
	// DefaultStaleLimit is the number of jobs Stale returns when q.Limit is 0.
	DefaultStaleLimit = 100
	// DefaultPurgeLimit is the number of jobs Purge deletes when limit is 0.
	DefaultPurgeLimit = 1000
)

// finalStates is the $in list of the final states.
var finalStates = bson.A{string(contracts.StateSucceeded), string(contracts.StateFailed), string(contracts.StateCancelled)}

// stalePart is one range query of Stale: its filter, the field it is
// sorted by, and the job's time that made it stale.
type stalePart struct {
	filter bson.D
	sortBy string
	key    func(contracts.Job) time.Time
}

// Stale returns, oldest first, up to q.Limit jobs the reaper must look at:
//
//   - running jobs whose heartbeat (or, with none, start, or with neither,
//     last update) is older than q.HeartbeatBefore;
//   - running jobs started before q.StartedBefore;
//   - pending jobs whose dispatch deadline is at or before q.DeadlineBefore and
//     whose claim, if any, expired before q.Now.
//
// A zero time disables its part; a zero q.Now is the current time. Each
// part is a sorted, limited range scan of its own index (the heartbeat part
// is three: one per fallback time); a job is ordered by the oldest of the
// times that made it stale. The parts are separate queries, not a snapshot:
// a job that changes meanwhile may be missed until the next call, or be
// returned although it just changed — the reaper's own compare-and-set
// sorts that out.
func (s *Store) Stale(ctx context.Context, q store.StaleQuery) ([]contracts.Job, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultStaleLimit
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	running := bson.E{Key: fState, Value: string(contracts.StateRunning)}
	// A fan-out parent runs nothing itself: it is never stale.
	notParent := bson.E{Key: fWindow, Value: nil}
	lt := func(t time.Time) bson.D { return bson.D{{Key: "$lt", Value: millis(t)}} }

	var parts []stalePart
	if !q.HeartbeatBefore.IsZero() {
		hb := lt(q.HeartbeatBefore)
		parts = append(parts,
			stalePart{
				filter: bson.D{running, notParent, {Key: fHeartbeatAt, Value: hb}},
				sortBy: fHeartbeatAt,
				key:    func(j contracts.Job) time.Time { return *j.HeartbeatAt },
			},
			stalePart{
				filter: bson.D{running, notParent, {Key: fHeartbeatAt, Value: nil}, {Key: fStartedAt, Value: hb}},
				sortBy: fStartedAt,
				key:    func(j contracts.Job) time.Time { return *j.StartedAt },
			},
			stalePart{
				filter: bson.D{running, notParent, {Key: fHeartbeatAt, Value: nil}, {Key: fStartedAt, Value: nil}, {Key: fUpdatedAt, Value: hb}},
				sortBy: fUpdatedAt,
				key:    func(j contracts.Job) time.Time { return j.UpdatedAt },
			})
	}
	if !q.StartedBefore.IsZero() {
		parts = append(parts, stalePart{
			filter: bson.D{running, notParent, {Key: fStartedAt, Value: lt(q.StartedBefore)}},
			sortBy: fStartedAt,
			key:    func(j contracts.Job) time.Time { return *j.StartedAt },
		})
	}
	if !q.DeadlineBefore.IsZero() {
		parts = append(parts, stalePart{
			filter: bson.D{
				{Key: fState, Value: string(contracts.StatePending)}, notParent,
				{Key: fDispatchDeadline, Value: bson.D{{Key: "$lte", Value: millis(q.DeadlineBefore)}}},
				{Key: "$or", Value: claimFree(fClaimUntil, "$lte", now)},
			},
			sortBy: fDispatchDeadline,
			key:    func(j contracts.Job) time.Time { return j.DispatchDeadline },
		})
	}
	if q.Kind != "" {
		parts = append(parts, stalePart{
			filter: bson.D{
				{Key: fState, Value: string(contracts.StatePending)}, notParent,
				{Key: fKind, Value: q.Kind},
				{Key: fClaimUntil, Value: nil},
			},
			sortBy: fCreatedAt,
			key:    func(j contracts.Job) time.Time { return j.CreatedAt },
		})
	}
	if len(parts) == 0 {
		return nil, nil
	}

	ctx, cancel := s.call(ctx)
	defer cancel()
	var found stale.Set
	for _, p := range parts {
		jobs, err := s.findJobs(ctx, p.filter, options.Find().
			SetSort(bson.D{{Key: p.sortBy, Value: 1}, {Key: fID, Value: 1}}).
			SetLimit(int64(limit)))
		if err != nil {
			return nil, fmt.Errorf("mongo: find stale jobs: %w", err)
		}
		for _, j := range jobs {
			found.Add(j, p.key(j))
		}
	}
	return found.Jobs(limit), nil
}

// PendingKinds returns the kinds of the pending jobs holding no claim, in
// name order: one $match + $group aggregation (FerretDB's distinct takes
// no time limit).
func (s *Store) PendingKinds(ctx context.Context) ([]string, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{
			{Key: fState, Value: string(contracts.StatePending)},
			{Key: fClaimUntil, Value: nil},
			{Key: fWindow, Value: nil},
		}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: fID, Value: "$" + fKind}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("mongo: list pending kinds: %w", err)
	}
	var rows []struct {
		Kind string `bson:"_id"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("mongo: list pending kinds: %w", err)
	}
	kinds := make([]string, 0, len(rows))
	for _, r := range rows {
		kinds = append(kinds, r.Kind)
	}
	sort.Strings(kinds)
	return kinds, nil
}

// Purge deletes up to limit final jobs that finished before finishedBefore,
// oldest first, and returns how many it deleted. A limit of 0 means
// DefaultPurgeLimit.
//
// It is a batch in two steps, as FerretDB has no TTL index and deleteMany
// takes no limit: find the ids of the oldest finished jobs, then delete
// those ids with the same condition again, so that nothing that changed in
// between goes (final jobs never change, but the condition costs nothing).
func (s *Store) Purge(ctx context.Context, finishedBefore time.Time, limit int) (int, error) {
	ctx = store.WithWriteOp(ctx, store.WritePurge)
	if limit <= 0 {
		limit = DefaultPurgeLimit
	}
	if finishedBefore.IsZero() {
		return 0, nil
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	// Top-level jobs only: a parent's children go with it.
	cond := bson.D{
		{Key: fFinishedAt, Value: bson.D{{Key: "$lt", Value: millis(finishedBefore)}}},
		{Key: fState, Value: bson.D{{Key: "$in", Value: finalStates}}},
		{Key: fParent, Value: nil},
	}
	cur, err := s.jobs.Find(ctx, cond, options.Find().
		SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fWindow, Value: 1}, {Key: fTenant, Value: 1}, {Key: fState, Value: 1},
			{Key: fChildrenTotal, Value: 1}}).
		SetSort(bson.D{{Key: fFinishedAt, Value: 1}, {Key: fID, Value: 1}}).
		SetLimit(int64(limit)))
	if err != nil {
		return 0, fmt.Errorf("mongo: purge jobs: find: %w", err)
	}
	var rows []struct {
		ID     string `bson:"_id"`
		Window int    `bson:"window_size"`
		Items  int    `bson:"children_total"`
		Tenant string `bson:"tenant"`
		State  string `bson:"state"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return 0, fmt.Errorf("mongo: purge jobs: find: %w", err)
	}
	// The jobs are deleted by tenant and state, so that each count of jobs
	// by state loses exactly the jobs deleted (another purge may delete
	// some of them first).
	type group struct {
		tenant string
		state  contracts.JobState
	}
	groups := map[group]bson.A{}
	n := 0
	for _, r := range rows {
		g := group{r.Tenant, publicState(r.State)}
		groups[g] = append(groups[g], r.ID)
		if r.Window > 0 {
			// The children first: a parent deleted first would leave them
			// with nothing to purge them by.
			k, err := s.deleteChildren(ctx, r.ID, r.Tenant, r.Items)
			n += k
			if err != nil {
				return n, fmt.Errorf("mongo: purge jobs: %w", err)
			}
		}
	}
	for g, ids := range groups {
		del := append(bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: ids}}}}, cond...)
		res, err := s.jobs.DeleteMany(ctx, del)
		if err != nil {
			return n, fmt.Errorf("mongo: purge jobs: delete: %w", err)
		}
		s.countMove(ctx, g.tenant, g.state, "", int(res.DeletedCount))
		n += int(res.DeletedCount)
		// Their bodies after them (body.go).
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = id.(string)
		}
		if err := s.dropBodies(ctx, strs); err != nil {
			return n, fmt.Errorf("mongo: purge jobs: %w", err)
		}
	}
	return n, nil
}

// deleteChildren deletes the children of parent (of tenant, with items
// children), state by state, counts them out of the counters of jobs by
// state, then deletes their bodies, and says how many went.
func (s *Store) deleteChildren(ctx context.Context, parent, tenant string, items int) (int, error) {
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fParent, Value: parent}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: fID, Value: "$" + fState}}}},
	})
	if err != nil {
		return 0, fmt.Errorf("read the states of the children of %s: %w", parent, err)
	}
	var states []struct {
		State string `bson:"_id"`
	}
	if err := cur.All(ctx, &states); err != nil {
		return 0, fmt.Errorf("read the states of the children of %s: %w", parent, err)
	}
	n := 0
	for _, st := range states {
		res, err := s.jobs.DeleteMany(ctx, bson.D{{Key: fParent, Value: parent}, {Key: fState, Value: st.State}})
		if err != nil {
			return n, fmt.Errorf("delete the children of %s: %w", parent, err)
		}
		s.countMove(ctx, tenant, publicState(st.State), "", int(res.DeletedCount))
		n += int(res.DeletedCount)
	}
	if err := s.dropBodies(ctx, childIDs(parent, items)); err != nil {
		return n, fmt.Errorf("delete the children of %s: %w", parent, err)
	}
	return n, nil
}

// findJobs runs a find on the jobs collection and returns the jobs with
// their bodies (withBodies).
func (s *Store) findJobs(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]contracts.Job, error) {
	cur, err := s.jobs.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var docs []jobDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	return s.withBodies(ctx, docs)
}
