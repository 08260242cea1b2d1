package mongo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Counts of jobs by state (see store.StateDeltas). The job_counts
// collection holds one document per tenant:
//
//	{_id: "tenant:<name>", n: {pending: …, running: …, succeeded: …, failed: …, cancelled: …}, version: <changes so far>}
//
// (a held fan-out child counts as pending, as everywhere outside the
// driver). Every write that creates, moves or deletes jobs adds its
// store.StateDeltas to its tenant's document with one $inc (countMove),
// right after the job write, so a move between two states is one atomic
// update of one document and the counts of a tenant never show a job in
// two states or in none. Stats and TenantCounts read these documents: a
// few per tenant, whatever the number of jobs.
//
// Without multi-document transactions the job write and its $inc are two
// steps. Between them (a round trip) the counts lag the jobs by that one
// write; a process that dies between them, or an $inc that fails, leaves
// the counts off by that write until Reconcile repairs them
// (reconcileStateCounts). Writes that need no counter change (a claim
// that keeps the job pending, a release of a held child) write nothing.
//
// The document "built" says the counters were built from the jobs; a
// store of an earlier release has none, and Open builds them once
// (buildStateCounts).

// stateCountsCollection holds the counters of jobs by state.
const stateCountsCollection = "job_counts"

// The fields of a counter document of jobs by state, and the id of the
// document that says the counters were built.
const (
	fCounts     = "n"
	builtMarker = "built"
)

// stateCountDoc is one tenant's counters of jobs by state.
type stateCountDoc struct {
	Scope   string           `bson:"_id"`
	N       map[string]int64 `bson:"n"`
	Version int64            `bson:"version"`
}

// tenant is the tenant the document counts.
func (d stateCountDoc) tenant() string { return strings.TrimPrefix(d.Scope, tenantPrefix) }

// counts is the document's counters, zeros left out.
func (d stateCountDoc) counts() map[contracts.JobState]int {
	out := map[contracts.JobState]int{}
	for st, n := range d.N {
		if n != 0 {
			out[contracts.JobState(st)] = int(n)
		}
	}
	return out
}

// tenantPrefix starts the id of every tenant's document (store.TenantScope).
var tenantPrefix = store.TenantScope("")

// tenantRange selects the tenants' documents, not the marker.
func tenantRange() bson.D {
	return bson.D{{Key: fID, Value: bson.D{{Key: "$gte", Value: tenantPrefix}, {Key: "$lt", Value: tenantPrefix[:len(tenantPrefix)-1] + ";"}}}}
}

// countMove adds to the counters what moving n jobs of tenant from one
// state to another does ("" from: inserted, "" to: deleted; see
// store.StateDeltas), after the job write that moved them. Best effort:
// an error or a process that dies first leaves drift that Reconcile
// repairs, and the job write stands.
func (s *Store) countMove(ctx context.Context, tenant string, from, to contracts.JobState, n int) {
	c := store.StateCounts{}
	c.Apply(store.StateDeltas(tenant, from, to, n)...)
	s.addStateCounts(ctx, c)
}

// countClaimed counts the jobs a Claim wrote: each was pending (the
// claim's compare-and-set) and is now as returned.
func (s *Store) countClaimed(ctx context.Context, jobs []contracts.Job) {
	c := store.StateCounts{}
	for _, j := range jobs {
		c.Apply(store.StateDeltas(j.Tenant, contracts.StatePending, j.State, 1)...)
	}
	s.addStateCounts(ctx, c)
}

// addStateCounts adds c to the counters: one $inc (an upsert) per tenant
// it touches, nothing when it is empty. It runs even when ctx has ended.
func (s *Store) addStateCounts(ctx context.Context, c store.StateCounts) {
	if len(c) == 0 {
		return
	}
	ctx, cancel := s.detached(ctx)
	defer cancel()
	for tenant, byState := range c {
		inc := bson.D{{Key: fVersion, Value: int64(1)}}
		for st, n := range byState {
			inc = append(inc, bson.E{Key: fCounts + "." + string(st), Value: int64(n)})
		}
		// MongoDB retries an upsert by _id that lost a race to create the
		// document; FerretDB may not, so a duplicate key runs it once more.
		for range 2 {
			_, err := s.stateCounts.UpdateOne(ctx, bson.D{{Key: fID, Value: store.TenantScope(tenant)}},
				bson.D{{Key: "$inc", Value: inc}}, options.UpdateOne().SetUpsert(true))
			if err == nil || !mongo.IsDuplicateKeyError(err) {
				break // an error is drift that Reconcile repairs
			}
		}
	}
}

// readStateCounts reads the counters of every tenant, by tenant.
func (s *Store) readStateCounts(ctx context.Context) (map[string]stateCountDoc, error) {
	cur, err := s.stateCounts.Find(ctx, tenantRange())
	if err != nil {
		return nil, fmt.Errorf("read counts of jobs by state: %w", err)
	}
	var docs []stateCountDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("read counts of jobs by state: %w", err)
	}
	out := make(map[string]stateCountDoc, len(docs))
	for _, d := range docs {
		out[d.tenant()] = d
	}
	return out, nil
}

// countJobs counts every job by tenant and state, held children as
// pending, with one aggregation: O(jobs), for building and reconciling
// the counters only.
func (s *Store) countJobs(ctx context.Context) (store.StateCounts, error) {
	cur, err := s.jobs.Aggregate(ctx, bson.A{
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: bson.D{{Key: "t", Value: "$" + fTenant}, {Key: "s", Value: "$" + fState}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	var rows []struct {
		Group struct {
			Tenant string `bson:"t"`
			State  string `bson:"s"`
		} `bson:"_id"`
		N int `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	out := store.StateCounts{}
	for _, r := range rows {
		out.Apply(store.StateDelta{Tenant: r.Group.Tenant, State: publicState(r.Group.State), N: r.N})
	}
	return out, nil
}

// publicState is the state of a stored state outside the driver: a held
// child is pending.
func publicState(stored string) contracts.JobState {
	if stored == stateHeld {
		return contracts.StatePending
	}
	return contracts.JobState(stored)
}

// Stats reads the counters of jobs by state (every state present, zeros
// included) and the admission slots of each tenant with some from its
// admission counter: two reads of a few documents per tenant, whatever
// the number of jobs, each exact but not taken at the same instant.
func (s *Store) Stats(ctx context.Context) (store.Counts, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	docs, err := s.readStateCounts(ctx)
	if err != nil {
		return store.Counts{}, fmt.Errorf("mongo: stats: %w", err)
	}
	counts := store.StateCounts{}
	for tenant, d := range docs {
		for st, n := range d.counts() {
			counts.Apply(store.StateDelta{Tenant: tenant, State: st, N: n})
		}
	}
	c := store.Counts{ByState: counts.ByState(), TenantActive: map[string]int{}}
	cur, err := s.counters.Find(ctx, append(tenantRange(), bson.E{Key: fActive, Value: bson.D{{Key: "$ne", Value: 0}}}))
	if err != nil {
		return store.Counts{}, fmt.Errorf("mongo: stats: read tenants' slots: %w", err)
	}
	var slots []counterDoc
	if err := cur.All(ctx, &slots); err != nil {
		return store.Counts{}, fmt.Errorf("mongo: stats: read tenants' slots: %w", err)
	}
	for _, d := range slots {
		c.TenantActive[strings.TrimPrefix(d.Scope, tenantPrefix)] = int(d.Active)
	}
	return c, nil
}

// TenantCounts reads tenant's counters of jobs by state (every state
// present, zeros included), children of its fan-outs included.
func (s *Store) TenantCounts(ctx context.Context, tenant string) (map[contracts.JobState]int, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	var d stateCountDoc
	err := s.stateCounts.FindOne(ctx, bson.D{{Key: fID, Value: store.TenantScope(tenant)}}).Decode(&d)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mongo: count the jobs of tenant %s: %w", tenant, err)
	}
	return store.StateCounts{tenant: d.counts()}.Tenant(tenant), nil
}

// buildStateCounts builds the counters from a count of the jobs when the
// database has none yet (a store of an earlier release, or a new one),
// then marks them built. Only missing tenants' documents are inserted:
// another store of this release opening at the same time may have built
// them and be counting writes in them already. Writes by stores of an
// earlier release still running are not counted; Reconcile repairs that
// drift once they are gone.
func (s *Store) buildStateCounts(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stateCountTimeout)
	defer cancel()
	err := s.stateCounts.FindOne(ctx, bson.D{{Key: fID, Value: builtMarker}}).Err()
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, mongo.ErrNoDocuments):
		return fmt.Errorf("look up the counts of jobs by state: %w", err)
	}
	actual, err := s.countJobs(ctx)
	if err != nil {
		return err
	}
	for tenant, byState := range actual {
		if err := s.insertStateCounts(ctx, tenant, byState); err != nil {
			return err
		}
	}
	_, err = s.stateCounts.InsertOne(ctx, bson.D{{Key: fID, Value: builtMarker}, {Key: "at", Value: millis(s.now())}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("mark the counts of jobs by state built: %w", err)
	}
	return nil
}

// insertStateCounts creates tenant's counters holding counts, unless they
// exist already.
func (s *Store) insertStateCounts(ctx context.Context, tenant string, counts map[contracts.JobState]int) error {
	_, err := s.stateCounts.InsertOne(ctx, stateCountDoc{Scope: store.TenantScope(tenant), N: countFields(counts), Version: 1})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("create the counts of jobs of tenant %s: %w", tenant, err)
	}
	return nil
}

// countFields is counts as stored: every state, zeros included.
func countFields(counts map[contracts.JobState]int) map[string]int64 {
	out := make(map[string]int64, len(contracts.AllStates))
	for _, st := range contracts.AllStates {
		out[string(st)] = int64(counts[st])
	}
	return out
}

// stateCheck is when Reconcile last compared the counters of jobs by state
// with the jobs, and the drift it found and could not repair yet, by
// tenant (see reconcileStateCounts).
type stateCheck struct {
	mu      sync.Mutex
	at      time.Time
	pending map[string]map[contracts.JobState]int
}

// start reports whether Reconcile must compare the counters with the jobs
// at now (the first time, every store.StateCheckEvery, and a grace period
// after a check that left drift to confirm) and, when it must, marks the
// check started at now, so that one that fails waits for the next turn
// too, and returns when the previous one started and the drift it left.
func (c *stateCheck) start(now time.Time, grace time.Duration) (time.Time, map[string]map[contracts.JobState]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.at.IsZero() || now.Sub(c.at) >= store.StateCheckEvery || (len(c.pending) > 0 && now.Sub(c.at) >= grace)
	if !due {
		return time.Time{}, nil, false
	}
	prevAt, prev := c.at, c.pending
	c.at, c.pending = now, nil
	return prevAt, prev, true
}

// leave records the drift a check left to confirm.
func (c *stateCheck) leave(pending map[string]map[contracts.JobState]int) {
	c.mu.Lock()
	c.pending = pending
	c.mu.Unlock()
}

// stateCountTimeout bounds a full count of the jobs by state (Open's
// build, Reconcile's check) instead of the store's timeout: it reads every
// job, which on a large database takes longer than any other call.
const stateCountTimeout = 5 * time.Minute

// reconcileStateCounts compares the counters of jobs by state with a count
// of the jobs when a check is due (stateCheck.start: the count is O(jobs),
// which the reaper's sweep every few seconds must not pay) and repairs
// what drifted. It returns the drift it repaired (store.StateCountDrift).
//
// The count is not a snapshot, and writes keep running while it runs: a
// write whose job step came before the count and whose $inc after the
// counters were read looks like drift but is not. So it reads every
// tenant's counters before and after the count and, per tenant whose
// counters differ from the count:
//
//   - quiet (its counters' version did not move across the count: no write
//     of that tenant completed meanwhile): set to the count with a
//     compare-and-set on that version, which misses if a write lands
//     first (the next check looks again);
//   - busy (the version moved): the difference is noted, and only the same
//     difference found again by a later check, a grace period
//     (WithReconcileGrace) or more afterwards, is taken off with a plain
//     $inc, which adds up with the writes running meanwhile. A write is
//     in flight for a round trip, so a difference that stays the same
//     across checks is drift.
//
// What remains: a write whose two steps straddle a quiet repair (its job
// step before the count, its $inc after the compare-and-set, a pause as
// long as a crash) is counted twice until the next check repairs it.
func (s *Store) reconcileStateCounts(ctx context.Context) (int, error) {
	now := s.now()
	prevAt, prev, ok := s.stateCheck.start(now, s.grace)
	if !ok {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, stateCountTimeout)
	defer cancel()
	pending := map[string]map[contracts.JobState]int{}
	defer func() { s.stateCheck.leave(pending) }()
	before, err := s.readStateCounts(ctx)
	if err != nil {
		return 0, err
	}
	actual, err := s.countJobs(ctx)
	if err != nil {
		return 0, err
	}
	if s.afterCount != nil {
		s.afterCount()
	}
	after, err := s.readStateCounts(ctx)
	if err != nil {
		return 0, err
	}
	tenants := map[string]bool{}
	for t := range after {
		tenants[t] = true
	}
	for t := range actual {
		tenants[t] = true
	}

	drift := 0
	for tenant := range tenants {
		stored, doc := after[tenant].counts(), after[tenant]
		d := store.StateCountDrift(store.StateCounts{tenant: stored}, store.StateCounts{tenant: actual[tenant]})
		if d == 0 {
			continue
		}
		old, existed := before[tenant]
		_, exists := after[tenant]
		if existed == exists && old.Version == doc.Version {
			ok, err := s.setStateCounts(ctx, tenant, doc, exists, actual[tenant])
			if err != nil {
				return drift, err
			}
			if ok {
				drift += d
			} else {
				pending[tenant] = nil // look again soon
			}
			continue
		}
		diff := map[contracts.JobState]int{}
		for _, st := range contracts.AllStates {
			if n := stored[st] - actual[tenant][st]; n != 0 {
				diff[st] = n
			}
		}
		seen, ok := prev[tenant]
		if !ok || !sameCounts(seen, diff) || now.Sub(prevAt) < s.grace {
			pending[tenant] = diff
			continue
		}
		fix := store.StateCounts{}
		for st, n := range diff {
			fix.Apply(store.StateDelta{Tenant: tenant, State: st, N: -n})
		}
		s.addStateCounts(ctx, fix)
		drift += d
	}
	return drift, nil
}

// setStateCounts sets tenant's counters to counts if they are still at
// doc's version (or still missing), and reports whether it did.
func (s *Store) setStateCounts(ctx context.Context, tenant string, doc stateCountDoc, exists bool, counts map[contracts.JobState]int) (bool, error) {
	if !exists {
		_, err := s.stateCounts.InsertOne(ctx, stateCountDoc{Scope: store.TenantScope(tenant), N: countFields(counts), Version: 1})
		switch {
		case err == nil:
			return true, nil
		case mongo.IsDuplicateKeyError(err):
			return false, nil
		}
		return false, fmt.Errorf("repair the counts of jobs of tenant %s: %w", tenant, err)
	}
	res, err := s.stateCounts.UpdateOne(ctx,
		bson.D{{Key: fID, Value: doc.Scope}, {Key: fVersion, Value: count(int(doc.Version))}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: fCounts, Value: countFields(counts)}}},
			{Key: "$inc", Value: bson.D{{Key: fVersion, Value: int64(1)}}},
		})
	if err != nil {
		return false, fmt.Errorf("repair the counts of jobs of tenant %s: %w", tenant, err)
	}
	return res.MatchedCount == 1, nil
}

// sameCounts reports whether two differences are the same.
func sameCounts(a, b map[contracts.JobState]int) bool {
	if len(a) != len(b) {
		return false
	}
	for st, n := range a {
		if b[st] != n {
			return false
		}
	}
	return true
}
