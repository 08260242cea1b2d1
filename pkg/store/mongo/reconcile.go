package mongo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/store"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Reconcile repairs the admission counters from the jobs themselves and
// returns the total drift it repaired (zero when the counters were exact).
//
// Drift comes only from a process that died (or lost the server) between
// the two writes of an admission or a release: the counter was moved but
// the job was not inserted, or the job finished but its slot was not given
// back. Both leave a counter too HIGH. A counter too low cannot come from
// the driver itself; it would take a hand edit.
//
// One sweep reads every counter {active, version}, then counts the active
// jobs per tenant (one aggregation; the global count is their sum), then
// for each scope whose count differs from the counter's:
//
//   - too low (active < counted): raised at once with a compare-and-set
//     {_id, version} → {active: counted, version + 1}. If an admission or
//     release moved the counter between the read and the write, its version
//     moved too and the write misses; the next sweep tries again. A job
//     can only be counted once its slot was taken, so a counter read
//     before the count that is lower than the count has really drifted.
//   - too high (active > counted): this is also what an admission looks
//     like between taking its slot and inserting its job, or a release
//     between finishing the job and giving the slot back. Lowering the
//     counter then would hand the same slot out twice, and the admission
//     cap would be exceeded. So the sweep only notes (version, count) and
//     lowers the counter, with the same compare-and-set, on a later sweep
//     at least the grace period (WithReconcileGrace) afterwards that finds
//     the same version and the same count: nothing was admitted or
//     released in that scope for that long, so no admission or release is
//     half-way through.
//   - a missing counter with active jobs is inserted (a duplicate key means
//     an admission created it meanwhile; the next sweep looks again).
//
// Counters of tenants with no active job stay, at zero: deleting one could
// race an admission that is creating it.
//
// Before the counters, it takes back abandoned fan-out admissions
// (dropAbandoned), deletes orphan bodies (sweepBodies: not drift, as no
// counter counts them) and repairs fan-out parents (repairParents); each
// parent repaired counts one in the drift.
//
// After them, when a check is due, it repairs the counters of jobs by
// state (reconcileStateCounts); what they had drifted adds to the drift.
func (s *Store) Reconcile(ctx context.Context) (int, error) {
	ctx = store.WithWriteOp(ctx, store.WriteReconcile)
	outer := ctx // the full count of jobs by state has a bound of its own
	ctx, cancel := s.call(ctx)
	defer cancel()

	// Admissions a process abandoned half-way first, then fan-out
	// parents: a parent that ends frees its slots.
	if _, err := s.dropAbandoned(ctx); err != nil {
		return 0, fmt.Errorf("mongo: reconcile staged admissions: %w", err)
	}
	if _, err := s.sweepBodies(ctx); err != nil {
		return 0, fmt.Errorf("mongo: reconcile bodies: %w", err)
	}
	repaired, err := s.repairParents(ctx)
	if err != nil {
		return repaired, fmt.Errorf("mongo: reconcile parents: %w", err)
	}

	// The counters first, then the jobs: see above.
	cur, err := s.counters.Find(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("mongo: reconcile counters: read counters: %w", err)
	}
	var stored []counterDoc
	if err := cur.All(ctx, &stored); err != nil {
		return 0, fmt.Errorf("mongo: reconcile counters: read counters: %w", err)
	}
	census, items, err := s.activeCensus(ctx)
	if err != nil {
		return 0, fmt.Errorf("mongo: reconcile counters: %w", err)
	}
	actual := map[string]int64{store.GlobalScope: 0}
	for tenant, n := range census.TenantActive {
		actual[store.TenantScope(tenant)] = int64(n)
		actual[store.GlobalScope] += int64(n)
	}
	for tenant, n := range items {
		actual[store.ItemsScope(tenant)] = int64(n)
	}

	// The global counter is lowered after the tenants' and raised before
	// them, so that it stays at least their sum in between (see reserve).
	slices.SortStableFunc(stored, func(a, b counterDoc) int {
		return globalRank(a, actual) - globalRank(b, actual)
	})
	now := s.now()
	drift := repaired
	seen := make(map[string]bool, len(stored))
	for _, c := range stored {
		seen[c.Scope] = true
		n := actual[c.Scope]
		switch {
		case c.Active == n:
			s.suspects.clear(c.Scope)
			continue
		case c.Active > n && !s.suspects.confirmed(c.Scope, c.Version, n, now, s.grace):
			continue
		}
		ok, err := s.setCounter(ctx, c, n)
		if err != nil {
			return drift, fmt.Errorf("mongo: reconcile counters: %w", err)
		}
		if ok {
			s.suspects.clear(c.Scope)
			drift += int(absDiff(c.Active, n))
		}
	}
	for scope, n := range actual {
		if seen[scope] || n == 0 {
			continue
		}
		_, err := s.counters.InsertOne(ctx, counterDoc{Scope: scope, Active: n, Version: 1})
		switch {
		case err == nil:
			drift += int(n)
		case !mongo.IsDuplicateKeyError(err):
			return drift, fmt.Errorf("mongo: reconcile counters: create counter %s: %w", scope, err)
		}
	}
	states, err := s.reconcileStateCounts(outer)
	if err != nil {
		return drift + states, fmt.Errorf("mongo: reconcile counts of jobs by state: %w", err)
	}
	return drift + states, nil
}

// globalRank orders the counters of a sweep: the global one first when it
// is to be raised (-1), last when it may be lowered (1), the others
// between (0).
func globalRank(c counterDoc, actual map[string]int64) int {
	switch {
	case c.Scope != store.GlobalScope:
		return 0
	case c.Active < actual[c.Scope]:
		return -1
	default:
		return 1
	}
}

// setCounter sets a counter to n if its version is still c.Version, and
// reports whether it did.
func (s *Store) setCounter(ctx context.Context, c counterDoc, n int64) (bool, error) {
	res, err := s.counters.UpdateOne(ctx,
		bson.D{{Key: fID, Value: c.Scope}, {Key: fVersion, Value: c.Version}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: fActive, Value: n}}},
			{Key: "$inc", Value: bson.D{{Key: fVersion, Value: int64(1)}}},
		})
	if err != nil {
		return false, fmt.Errorf("repair counter %s: %w", c.Scope, err)
	}
	return res.ModifiedCount == 1, nil
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// suspects remembers counters that looked too high, until a later sweep
// confirms them or they come right. It lives in the Store: a reaper that
// restarts starts watching again, which only delays a repair.
type suspects struct {
	mu sync.Mutex
	m  map[string]suspect
}

// suspect is one counter seen too high: its version and the jobs counted
// then, and when that was first seen.
type suspect struct {
	version int64
	counted int64
	since   time.Time
}

func newSuspects() *suspects { return &suspects{m: map[string]suspect{}} }

// confirmed reports whether the counter of scope, now at version with
// counted active jobs, has looked like this for at least grace. If not, it
// starts (or restarts) watching it.
func (w *suspects) confirmed(scope string, version, counted int64, now time.Time, grace time.Duration) bool {
	if grace == 0 {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.m[scope]
	if ok && prev.version == version && prev.counted == counted {
		return now.Sub(prev.since) >= grace
	}
	w.m[scope] = suspect{version: version, counted: counted, since: now}
	return false
}

// clear stops watching scope.
func (w *suspects) clear(scope string) {
	w.mu.Lock()
	delete(w.m, scope)
	w.mu.Unlock()
}
