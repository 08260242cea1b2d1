package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/update"
)

// Transition applies ch to the job while it is still at exp.State and
// exp.Attempt (and, when exp.ClaimFreeAt is set, holds no claim lasting past
// it), in one findOneAndUpdate, and returns the job as it is afterwards.
//
// Nil fields of ch keep their value; ClearClaim wins over ClaimUntil. On a
// final state the job's finished_at becomes ch.Now, its claim,
// next_dispatch_at and active key are removed (its key stays, but no longer
// blocks a new job) and, when it was active, its admission slots are
// released. A zero ch.Now is taken as the current time.
//
// The release is a second write, after the job's: if it fails (or the
// process dies first) the counters stay one too high, which rejects a
// little early until Reconcile repairs them, and Transition still reports
// success because the job did change. So is the count of the move in the
// counters of jobs by state (countMove), before the release.
//
// A change the state machine forbids, or an Attempt that does not grow, is
// store.ErrBadTransition and touches nothing. A miss is store.ErrNotFound
// when no job has that id and store.ErrConflict otherwise.
//
// The job returned has its payload and inputs (its body, read by _id after
// the write, when it has one: see body.go); an error reading the body
// says the change was applied.
func (s *Store) Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error) {
	return s.transition(ctx, exp, ch, true)
}

// transition is Transition; the job returned has its body only when cold
// is set.
func (s *Store) transition(ctx context.Context, exp store.Expect, ch store.Change, cold bool) (contracts.Job, error) {
	ctx = store.WithWriteOp(ctx, store.WriteTransition)
	op := "transition job " + exp.ID
	if err := ch.Check(exp); err != nil {
		return contracts.Job{}, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if ch.Now.IsZero() {
		ch.Now = time.Now()
	}
	ctx, cancel := s.call(ctx)
	defer cancel()

	var d jobDoc
	filter := casFilter(exp)
	if exp.State == contracts.StatePending && ch.State.Final() {
		// A fan-out child waiting for its window may end too (a cancel).
		filter[1] = bson.E{Key: fState, Value: bson.D{{Key: "$in", Value: waitingStates}}}
	}
	err := s.jobs.FindOneAndUpdate(ctx, filter, buildUpdate(ch),
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return contracts.Job{}, fmt.Errorf("mongo: %s: %w", op, s.explainMiss(ctx, exp))
	case err != nil:
		return contracts.Job{}, fmt.Errorf("mongo: %s: %w", op, err)
	}
	s.countMove(ctx, d.Tenant, exp.State, ch.State, 1)
	if ch.State.Final() && exp.State.Active() {
		// Best effort by design: see the doc comment.
		_ = s.releaseHeld(ctx, heldBy(d.job()))
		if d.Parent != "" {
			// Best effort too: Reconcile finishes what this leaves.
			_ = s.childEnded(ctx, d, ch.State, ch.Now)
		}
	}
	if ch.State == contracts.StateRunning && exp.State == contracts.StatePending && d.Parent != "" {
		_ = s.startParent(ctx, d.Tenant, d.Parent, ch.Now)
	}
	if !cold {
		return d.job(), nil
	}
	j, err := s.withBody(ctx, d)
	if err != nil {
		return d.job(), fmt.Errorf("mongo: %s: applied, then: %w", op, err)
	}
	return j, nil
}

// casFilter is the compare side of a compare-and-set.
func casFilter(exp store.Expect) bson.D {
	f := bson.D{
		{Key: fID, Value: exp.ID},
		{Key: fState, Value: string(exp.State)},
		{Key: fClaim, Value: exp.Claim},
	}
	if !exp.ClaimFreeAt.IsZero() {
		f = append(f, bson.E{Key: "$or", Value: claimFree(fClaimUntil, "$lte", exp.ClaimFreeAt)})
	}
	return f
}

// claimFree matches a job with no claim, or one whose claim compares to t
// with op ("$lte": over by t, "$lt": over before t). {field: null} matches
// a missing field, which is how an unset claim is stored.
func claimFree(field, op string, t time.Time) bson.A {
	return bson.A{
		bson.D{{Key: field, Value: nil}},
		bson.D{{Key: field, Value: bson.D{{Key: op, Value: millis(t)}}}},
	}
}

// buildUpdate is the set side of a compare-and-set: $set, $unset and $inc
// of the fields ch changes.
func buildUpdate(ch store.Change) bson.D {
	var set, unset, inc bson.D
	setT := func(field string, t *time.Time) {
		if m := ptrMillis(t); m != nil {
			set = append(set, bson.E{Key: field, Value: *m})
		} else {
			unset = append(unset, bson.E{Key: field, Value: ""})
		}
	}
	final := ch.State.Final()

	set = append(set, bson.E{Key: fState, Value: string(ch.State)}, bson.E{Key: fUpdatedAt, Value: millis(ch.Now)})
	if ch.Claim != 0 {
		set = append(set, bson.E{Key: fClaim, Value: ch.Claim})
	}
	if ch.IncAttempt {
		inc = append(inc, bson.E{Key: fRuns, Value: 1})
	}
	if ch.Worker != nil {
		set = append(set, bson.E{Key: fWorker, Value: *ch.Worker})
	}
	if ch.Unstart {
		inc = append(inc, bson.E{Key: fRuns, Value: -1})
		unset = append(unset, bson.E{Key: fWorker, Value: ""}, bson.E{Key: fStartedAt, Value: ""}, bson.E{Key: fHeartbeatAt, Value: ""})
	}
	switch {
	case final || ch.ClearClaim:
		unset = append(unset, bson.E{Key: fClaimUntil, Value: ""})
	case ch.ClaimUntil != nil:
		setT(fClaimUntil, ch.ClaimUntil)
	}
	switch {
	case final:
		unset = append(unset, bson.E{Key: fNextDispatchAt, Value: ""}, bson.E{Key: fActiveKey, Value: ""})
		set = append(set, bson.E{Key: fFinishedAt, Value: millis(ch.Now)})
	case ch.NextDispatchAt != nil:
		setT(fNextDispatchAt, ch.NextDispatchAt)
	}
	if ch.StartedAt != nil {
		setT(fStartedAt, ch.StartedAt)
	}
	if ch.HeartbeatAt != nil {
		setT(fHeartbeatAt, ch.HeartbeatAt)
	}
	if ch.Error != nil {
		set = append(set, bson.E{Key: fError, Value: *ch.Error})
	}
	if len(ch.Result) > 0 {
		set = append(set, bson.E{Key: fResult, Value: string(ch.Result)})
	}
	if ch.Progress != nil {
		set = append(set, bson.E{Key: fProgress, Value: toProgressDoc(ch.Progress)})
	}
	if ch.CancelRequested != nil {
		set = append(set, bson.E{Key: fCancelRequested, Value: *ch.CancelRequested})
	}
	if ch.Errors != nil {
		set = append(set, bson.E{Key: fErrors, Value: toRunErrDocs(ch.Errors)})
	}
	if ch.Usage != nil {
		set = append(set, bson.E{Key: fUsage, Value: toUsageDoc(ch.Usage)})
	}

	u := bson.D{{Key: "$set", Value: set}}
	if len(unset) > 0 {
		u = append(u, bson.E{Key: "$unset", Value: unset})
	}
	if len(inc) > 0 {
		u = append(u, bson.E{Key: "$inc", Value: inc})
	}
	return u
}

// missView is what explainMiss reads of a job.
type missView struct {
	State      string     `bson:"state"`
	Claim      int64      `bson:"attempt"`
	ClaimUntil *time.Time `bson:"claim_until,omitempty"`
}

// explainMiss says why a compare-and-set on exp matched no document.
func (s *Store) explainMiss(ctx context.Context, exp store.Expect) error {
	var v missView
	err := s.jobs.FindOne(ctx, bson.D{{Key: fID, Value: exp.ID}},
		options.FindOne().SetProjection(bson.D{{Key: fState, Value: 1}, {Key: fClaim, Value: 1}, {Key: fClaimUntil, Value: 1}})).
		Decode(&v)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return store.ErrNotFound
	case err != nil:
		return fmt.Errorf("read job after a miss: %w", err)
	case contracts.JobState(v.State) == exp.State && v.Claim == exp.Claim && v.ClaimUntil != nil:
		return fmt.Errorf("claim held until %s, past %s: %w",
			v.ClaimUntil.UTC().Format(time.RFC3339Nano), exp.ClaimFreeAt.UTC().Format(time.RFC3339Nano), store.ErrConflict)
	default:
		return fmt.Errorf("job is %s at attempt %d, expected %s at %d: %w",
			v.State, v.Claim, exp.State, exp.Claim, store.ErrConflict)
	}
}

// Update reads the job, asks decide for a change and applies it as a
// compare-and-set on the state and attempt read; after a miss it reads and
// asks again (see update.ByTransition). It reads and returns the job's
// document alone: decide sees, and the caller gets, the job without its
// payload and inputs (see body.go).
func (s *Store) Update(ctx context.Context, id string, decide store.Decide) (contracts.Job, error) {
	ctx = store.WithWriteOp(ctx, store.WriteUpdate)
	return update.ByTransition(ctx, hotStore{s}, id, decide)
}

// hotStore is the store as Update reads and writes it: Get and
// Transition without the bodies.
type hotStore struct{ *Store }

// Get reads the job's document alone.
func (h hotStore) Get(ctx context.Context, id string) (contracts.Job, error) {
	return h.get(ctx, id, false)
}

// Transition returns the job's document alone.
func (h hotStore) Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error) {
	return h.transition(ctx, exp, ch, false)
}

// UpdateEach is Update of each id in turn (see store.Store).
func (s *Store) UpdateEach(ctx context.Context, ids []string, decide store.DecideEach) ([]store.Updated, error) {
	ctx = store.WithWriteOp(ctx, store.WriteUpdate)
	return update.Each(ctx, ids, decide, s.Update), nil
}
