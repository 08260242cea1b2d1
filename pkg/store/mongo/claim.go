package mongo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// The fair-queue clocks live in the counter documents beside the active
// counts: fair_at of a tenant's counter is the stamp of its latest job, and
// fair_at of the global counter is the system's virtual time (the largest
// fair_at claimed so far). See store.FairAt.

// maxKeySkips bounds how many ready jobs held back by their concurrency key
// one Claim of one kind steps over before it gives up on that kind.
const maxKeySkips = 1000

// maxClaimRounds bounds the finds of one kind in one Claim.
const maxClaimRounds = 4

// stampFair gives a tenant's new job its fair-queue stamp: the tenant's
// clock first catches up with the system's virtual time ($max), then moves
// on by 1/weight ($inc), each an atomic single-document update, so two
// admissions of one tenant never share a stamp.
func (s *Store) stampFair(ctx context.Context, tenant string, weight float64) (float64, error) {
	stamps, err := s.stampFairN(ctx, tenant, weight, 1)
	if err != nil {
		return 0, err
	}
	return stamps[0], nil
}

// readyFilter selects the jobs of kind ready at now: pending, holding no
// live claim, due, and not a fan-out parent (never dispatched).
func readyFilter(kind string, now time.Time) bson.D {
	return bson.D{
		{Key: fState, Value: string(contracts.StatePending)},
		{Key: fKind, Value: kind},
		{Key: fWindow, Value: nil},
		{Key: "$and", Value: bson.A{
			bson.D{{Key: "$or", Value: claimFree(fClaimUntil, "$lte", now)}},
			bson.D{{Key: "$or", Value: claimFree(fNextDispatchAt, "$lte", now)}},
		}},
	}
}

// readyView is what a claim reads of a ready job.
type readyView struct {
	ID     string  `bson:"_id"`
	Kind   string  `bson:"kind"`
	Tenant string  `bson:"tenant"`
	Claim  int64   `bson:"attempt"`
	Key    string  `bson:"concurrency_key"`
	Limit  int     `bson:"concurrency_limit"`
	FairAt float64 `bson:"fair_at"`
	// Resources is the job's request, which the claim packs by.
	Resources *resourcesDoc `bson:"resources"`
}

// request is the job's resource request as the claim packs by it.
func (v readyView) request() *contracts.Resources {
	if v.Resources == nil {
		return nil
	}
	return &contracts.Resources{CPU: v.Resources.CPU, Memory: v.Resources.Memory}
}

// Claim starts up to len(r.Slots[kind]) of the best ready jobs of each kind
// on the slots given (see store.ClaimRequest and store.Started) and returns
// them as they are afterwards, best first per kind, kinds in name order: a
// find of the candidates on the ready index, then one compare-and-set per
// candidate, so a job another scheduler claimed meanwhile is skipped. The
// system's virtual time then moves up to the largest fair_at claimed; a
// fan-out child that starts starts its parent.
//
// A concurrency key is checked by counting its holders before the first
// claim of it (store.KeySlots), under the key's lock (see keyLocks), so two
// schedulers never both take its last free slot; a key another scheduler
// is claiming counts as full this time. A worker's slots are locked the
// same way (lockWorkers) before its running jobs are counted.
//
// The jobs claimed come with their payloads and inputs: their bodies are
// read after the claims, by _id, one query for them all (body.go). Jobs
// claimed before an error are returned with it.
func (s *Store) Claim(ctx context.Context, r store.ClaimRequest) ([]contracts.Job, error) {
	ctx = store.WithWriteOp(ctx, store.WriteClaim)
	docs, err := s.claim(ctx, r)
	if len(docs) == 0 {
		return nil, err
	}
	hot := make([]contracts.Job, len(docs))
	for i, d := range docs {
		hot[i] = d.job()
	}
	s.countClaimed(ctx, hot)
	bctx, cancel := s.call(ctx)
	defer cancel()
	out, berr := s.withBodies(bctx, docs)
	if berr != nil {
		// Claimed all the same: their short leases expire (store.Started).
		return nil, errors.Join(err, fmt.Errorf("mongo: claim jobs: %w", berr))
	}
	return out, err
}

// lockWorkers takes the slot locks of the workers of r whose capacity is
// known (the store bounds only those) and returns r with no room on those
// whose lock another claim holds. r's own maps are left as they are: the
// caller keeps using them.
func lockWorkers(ctx context.Context, locks *keyLocks, r store.ClaimRequest, now time.Time) (store.ClaimRequest, error) {
	var room map[string]int
	seen := map[string]bool{}
	for _, list := range r.Slots {
		for _, w := range list {
			if seen[w] || r.Capacity[w] <= 0 {
				continue
			}
			seen[w] = true
			ok, err := locks.takeWorker(ctx, w, now)
			if err != nil {
				return r, err
			}
			if ok {
				continue
			}
			if room == nil {
				room = make(map[string]int, len(r.Room)+1)
				maps.Copy(room, r.Room)
			}
			room[w] = 0
		}
	}
	if room != nil {
		r.Room = room
	}
	return r, nil
}

// claim is Claim's claims: the documents of the jobs it started.
func (s *Store) claim(ctx context.Context, r store.ClaimRequest) ([]jobDoc, error) {
	now, kinds, wants := r.Plan()
	if len(kinds) == 0 {
		return nil, nil
	}
	locks := s.newKeyLocks()
	defer locks.release(ctx)
	// Each step has its own timeout: one claim may take many.
	var (
		out     []jobDoc
		virtual float64
	)
	slots := store.NewKeySlots(func(tenant, key string) (int, error) {
		ok, err := locks.take(ctx, tenant, key, now)
		if err != nil || !ok {
			return math.MaxInt32, err // held by another claim: full for this one
		}
		return s.keyHolders(ctx, tenant, key, now)
	})
	// Without transactions the count of a worker's running jobs and the
	// claims for it are apart: two schedulers claiming for one worker at
	// the same moment could each see its last free slot, and the store
	// would show the worker running more than its capacity. So a claim
	// first locks the workers whose capacity bounds it, as it locks keys;
	// a worker another claim holds gets nothing from this one.
	r, err := lockWorkers(ctx, locks, r, now)
	if err != nil {
		return nil, fmt.Errorf("mongo: claim jobs: %w", err)
	}
	fit, err := r.NewSlots(store.RunningOn{
		Count: func(worker string) (int, error) { return s.runningOn(ctx, worker) },
		Jobs:  func(worker string) ([]store.RunningJob, error) { return s.jobsOn(ctx, worker) },
	})
	if err != nil {
		return nil, fmt.Errorf("mongo: claim jobs: %w", err)
	}
	for _, kind := range kinds {
		want := wants[kind]
		got, skipped := 0, 0
		// Each round reads from the best: a little more than still wanted,
		// plus the jobs held back by their keys so far. Candidates another
		// scheduler took first are skipped and the next round looks again.
		for round := 0; round < maxClaimRounds && got < want && skipped <= maxKeySkips; round++ {
			limit := want - got + 8 + skipped
			cands, err := s.ready(ctx, kind, now, limit)
			if err != nil {
				return out, fmt.Errorf("mongo: claim jobs: %w", err)
			}
			missed, skippedNow := false, 0
			for _, c := range cands {
				if got == want {
					break
				}
				worker, fits, more := fit.Fit(kind, c.request())
				if !more {
					want = got // no slot left for this kind
					break
				}
				if !fits {
					skippedNow++ // waits for room enough (see store.Slots)
					continue
				}
				ok, err := slots.Take(c.Tenant, c.Key, c.Limit)
				if err != nil {
					return out, fmt.Errorf("mongo: claim jobs: %w", err)
				}
				if !ok {
					skippedNow++
					continue
				}
				d, ok, err := s.claimOne(ctx, c, worker, r.StartAt(now))
				if err != nil {
					return out, fmt.Errorf("mongo: claim jobs: %w", err)
				}
				if !ok {
					missed = true
					slots.Give(c.Tenant, c.Key)
					continue
				}
				fit.Take(kind, worker, c.request())
				out = append(out, d)
				virtual = max(virtual, c.FairAt)
				got++
			}
			skipped = skippedNow
			if len(cands) < limit || (!missed && skippedNow == 0) {
				break // no more ready jobs, or nothing held any back
			}
		}
	}
	if len(out) > 0 {
		ctx, cancel := s.call(ctx)
		defer cancel()
		_, err := s.counters.UpdateOne(ctx, bson.D{{Key: fID, Value: store.GlobalScope}},
			bson.D{{Key: "$max", Value: bson.D{{Key: fFairAt, Value: virtual}}}})
		if err != nil {
			return out, fmt.Errorf("mongo: claim jobs: advance the virtual time: %w", err)
		}
	}
	return out, nil
}

// ready finds up to limit ready jobs of kind, best first.
func (s *Store) ready(ctx context.Context, kind string, now time.Time, limit int) ([]readyView, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	cur, err := s.jobs.Find(ctx, readyFilter(kind, now), options.Find().
		SetSort(bson.D{{Key: fPriority, Value: -1}, {Key: fFairAt, Value: 1}, {Key: fID, Value: 1}}).
		SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: fTenant, Value: 1}, {Key: fClaim, Value: 1}, {Key: fConcurrencyKey, Value: 1},
			{Key: fConcurrencyLimit, Value: 1}, {Key: fFairAt, Value: 1}, {Key: fKind, Value: 1}, {Key: fResources, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find the ready jobs of %q: %w", kind, err)
	}
	var out []readyView
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read the ready jobs of %q: %w", kind, err)
	}
	return out, nil
}

// keyHolders counts the jobs holding a slot of the tenant's key (see
// store.KeySlots).
func (s *Store) keyHolders(ctx context.Context, tenant, key string, now time.Time) (int, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := s.jobs.CountDocuments(ctx, bson.D{
		{Key: fConcurrencyKey, Value: key},
		{Key: fTenant, Value: tenant},
		{Key: fWindow, Value: nil}, // a fan-out parent runs nothing itself
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fState, Value: string(contracts.StateRunning)}},
			bson.D{{Key: fState, Value: string(contracts.StatePending)}, {Key: fClaimUntil, Value: bson.D{{Key: "$gt", Value: millis(now)}}}},
		}},
	})
	if err != nil {
		return 0, fmt.Errorf("count the holders of key %q: %w", key, err)
	}
	return int(n), nil
}

// runningOn counts the jobs running on worker.
func (s *Store) runningOn(ctx context.Context, worker string) (int, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	n, err := s.jobs.CountDocuments(ctx, bson.D{{Key: fState, Value: string(contracts.StateRunning)}, {Key: fWorker, Value: worker}})
	if err != nil {
		return 0, fmt.Errorf("count the jobs running on worker %s: %w", worker, err)
	}
	return int(n), nil
}

// jobsOn reads the jobs running on worker as a claim packs by them.
func (s *Store) jobsOn(ctx context.Context, worker string) ([]store.RunningJob, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	cur, err := s.jobs.Find(ctx, bson.D{{Key: fState, Value: string(contracts.StateRunning)}, {Key: fWorker, Value: worker}},
		options.Find().SetProjection(bson.D{{Key: fKind, Value: 1}, {Key: fResources, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find the jobs running on worker %s: %w", worker, err)
	}
	var views []readyView
	if err := cur.All(ctx, &views); err != nil {
		return nil, fmt.Errorf("read the jobs running on worker %s: %w", worker, err)
	}
	out := make([]store.RunningJob, len(views))
	for i, v := range views {
		out[i] = store.RunningJob{Kind: v.Kind, Resources: v.request()}
	}
	return out, nil
}

// claimOne starts one candidate on worker at now (store.Started) if it is
// still ready at the claim it was read at, and returns its document as it
// is afterwards.
func (s *Store) claimOne(ctx context.Context, c readyView, worker string, now time.Time) (jobDoc, bool, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	filter := bson.D{
		{Key: fID, Value: c.ID},
		{Key: fState, Value: string(contracts.StatePending)},
		{Key: fClaim, Value: c.Claim},
		{Key: "$or", Value: claimFree(fClaimUntil, "$lte", now)},
	}
	// The claim read is the compare-and-set's: the next claim follows it.
	update := buildUpdate(store.StartChange(contracts.Job{Claim: c.Claim}, worker, now))
	var d jobDoc
	err := s.jobs.FindOneAndUpdate(cctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return jobDoc{}, false, nil
	case err != nil:
		return jobDoc{}, false, fmt.Errorf("start job %s: %w", c.ID, err)
	}
	if d.Parent != "" {
		// Best effort, as at a promotion: the parent also starts with its
		// next child.
		_ = s.startParent(cctx, d.Tenant, d.Parent, now)
	}
	return d, true, nil
}
