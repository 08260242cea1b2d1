package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Fan-out without transactions. Every step is a single-document atomic
// update, ordered so that a process that dies between two steps leaves
// the window narrower, never wider, and Reconcile (repairParents) puts
// right what it left:
//
//   - Admission takes the parent's slots, inserts every child held (state
//     stateHeld: out of every query of pending jobs), inserts the parent,
//     then releases the first min(window, items) children. Children whose
//     parent never went in are taken back by Reconcile (see stage.go).
//   - A child that ends counts itself on its parent ($inc), then, if it was
//     released, takes the next index to release from the parent's cursor
//     ($inc children_released: each index is taken once) and releases that
//     child. So a parent never has more released children that have not
//     ended than its window. The last child to end ends the parent (a
//     compare-and-set on its state) and frees its slots.
//   - fail_fast and a cancel move the cursor to the end and end every
//     waiting child cancelled (one updateMany, then its count on the
//     parent).

// fanoutBatch is how many children one insertMany carries, by default
// (WithFanoutBatch).
const fanoutBatch = 1000

// parentFilter matches the active parent id.
func parentFilter(id string) bson.D {
	return bson.D{{Key: fID, Value: id}, {Key: fWindow, Value: bson.D{{Key: "$gt", Value: 0}}},
		{Key: fState, Value: bson.D{{Key: "$in", Value: activeStates}}}}
}

// waitingStates are the stored states of a child that has not started.
var waitingStates = bson.A{string(contracts.StatePending), stateHeld}

// admitFanout admits a parent with its items (see the top of this file).
func (s *Store) admitFanout(ctx context.Context, r store.AdmitRequest) (contracts.Job, store.Admission, error) {
	job := r.Job
	op := "admit parent " + job.ID
	if err := store.CheckNewJob(job); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if err := store.CheckFanout(&job, r.Items); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if job.CreatedAt.IsZero() {
		job.CreatedAt = time.Now()
	}
	if job.UpdatedAt.IsZero() {
		job.UpdatedAt = job.CreatedAt
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	if job.Key != "" {
		j, found, err := s.activeByKey(ctx, job.Tenant, job.Key)
		if err != nil {
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
		}
		if found {
			return j, store.Joined, nil
		}
	}
	adm, err := s.reserve(ctx, r.Caps, job)
	if err != nil || adm != store.Admitted {
		if err != nil {
			err = fmt.Errorf("mongo: %s: %w", op, err)
		}
		return contracts.Job{}, adm, err
	}
	release := store.ReleasedAtAdmission(job.Concurrency, len(r.Items))
	stamps, err := s.stampFairN(ctx, job.Tenant, r.Caps.Weight, release)
	if err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, s.afterFailedInsert(ctx, job, err))
	}
	// The children first, held, so that the parent is visible only once
	// they are all in (see stage.go).
	if err := s.startStaging(ctx, job, len(r.Items)); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, s.afterFailedInsert(ctx, job, err))
	}
	if err := s.insertChildren(ctx, job, r.Items, stamps); err != nil {
		if uerr := s.unstage(ctx, job, len(r.Items)); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
	}
	doc := newJobDoc(job)
	doc.Weight = r.Caps.Weight
	if doc.Weight <= 0 {
		doc.Weight = 1
	}
	doc.ChildrenReleased = release
	// The parent's own body before the parent (body.go).
	var body bodyDoc
	if doc.Body {
		body = newBodyDoc(job, s.now())
		if err := s.insertBodies(ctx, []bodyDoc{body}); err != nil {
			if uerr := s.unstage(ctx, job, len(r.Items)); uerr != nil {
				err = errors.Join(err, uerr)
			}
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
		}
	}
	if _, err := s.jobs.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) && job.Key != "" {
			if uerr := s.unstage(ctx, job, len(r.Items)); uerr != nil {
				return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, errors.Join(err, uerr))
			}
			if j, found, lerr := s.activeByKey(ctx, job.Tenant, job.Key); lerr == nil && found {
				return j, store.Joined, nil
			}
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, err)
		}
		// Refused: take it all back. Otherwise the parent may be in, or
		// may still land (see afterFailedJobInsert): its staging stays
		// for Reconcile (dropAbandoned) to finish or take back.
		if unapplied(err) {
			dctx, cancel := s.detached(ctx)
			in, xerr := s.exists(dctx, job.ID)
			cancel()
			if xerr == nil && !in {
				if uerr := s.unstage(ctx, job, len(r.Items)); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
		}
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, err)
	}
	// The parent is counted once all its children are in (they were, as
	// they went in): a parent whose admission stops before is never
	// counted until it ends (abortParent).
	s.countMove(ctx, job.Tenant, "", contracts.StatePending, 1)
	// The first children go: a failure here leaves them held until
	// Reconcile releases them (they are below the parent's cursor).
	if err := s.releaseBelow(ctx, job.ID, release, job.UpdatedAt); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: release the first children: %w", op, err)
	}
	// A staged document left behind is Reconcile's to delete.
	_ = s.endStaging(ctx, job.ID)
	out := doc.job()
	if doc.Body {
		body.fill(&out)
	}
	return out, store.Admitted, nil
}

// abortError is the error of a parent whose admission did not complete.
var abortError = contracts.JobError(contracts.ClassStale, "the admission of this fan-out did not complete: its children were not all stored")

// abortParent ends a parent whose children did not all go in: its children
// are deleted (uncounted: they were counted pending as they went in), then
// their bodies, it
// ends failed, and its slots are freed. It was not counted in the counters
// of jobs by state (admitFanout counts a parent once all its children are
// in), so it is counted as a failed job.
func (s *Store) abortParent(ctx context.Context, p jobDoc, now time.Time) error {
	ctx, cancel := s.detached(ctx)
	defer cancel()
	gone, err := s.jobs.DeleteMany(ctx, bson.D{{Key: fParent, Value: p.ID}})
	if err != nil {
		return fmt.Errorf("delete the children of %s: %w", p.ID, err)
	}
	s.countMove(ctx, p.Tenant, contracts.StatePending, "", int(gone.DeletedCount))
	if err := s.dropBodies(ctx, childIDs(p.ID, p.ChildrenTotal)); err != nil {
		return fmt.Errorf("delete the children of %s: %w", p.ID, err)
	}
	at := millis(now)
	r, err := s.jobs.UpdateOne(ctx, parentFilter(p.ID), bson.D{
		{Key: "$set", Value: bson.D{{Key: fState, Value: string(contracts.StateFailed)}, {Key: fError, Value: abortError},
			{Key: fFinishedAt, Value: at}, {Key: fUpdatedAt, Value: at}, {Key: fChildrenTotal, Value: 0}}},
		{Key: "$unset", Value: bson.D{{Key: fNextDispatchAt, Value: ""}, {Key: fActiveKey, Value: ""}}},
	})
	if err != nil {
		return fmt.Errorf("end parent %s: %w", p.ID, err)
	}
	if r.ModifiedCount == 1 {
		s.countMove(ctx, p.Tenant, "", contracts.StateFailed, 1)
		return s.releaseHeld(ctx, heldBy(p.job()))
	}
	return nil
}

// stampFairN takes n consecutive stamps in the tenant's fair queue (see
// stampFair) in two updates.
func (s *Store) stampFairN(ctx context.Context, tenant string, weight float64, n int) ([]float64, error) {
	if n == 0 {
		return nil, nil
	}
	if weight <= 0 {
		weight = 1
	}
	var g struct {
		FairAt float64 `bson:"fair_at"`
	}
	err := s.counters.FindOne(ctx, bson.D{{Key: fID, Value: store.GlobalScope}}).Decode(&g)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("read the virtual time: %w", err)
	}
	scope := bson.D{{Key: fID, Value: store.TenantScope(tenant)}}
	if _, err := s.counters.UpdateOne(ctx, scope, bson.D{{Key: "$max", Value: bson.D{{Key: fFairAt, Value: g.FairAt}}}}); err != nil {
		return nil, fmt.Errorf("catch the tenant's fair queue up: %w", err)
	}
	var t struct {
		FairAt float64 `bson:"fair_at"`
	}
	err = s.counters.FindOneAndUpdate(ctx, scope, bson.D{{Key: "$inc", Value: bson.D{{Key: fFairAt, Value: float64(n) / weight}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&t)
	if err != nil {
		return nil, fmt.Errorf("stamp the tenant's fair queue: %w", err)
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = t.FairAt - float64(n-1-i)/weight
	}
	return out, nil
}

// insertChildren inserts every child of parent held, the first len(stamps)
// with those fair-queue stamps, touching its staged document after each
// batch (see stage.go). Each batch's bodies go in before its children
// (body.go).
func (s *Store) insertChildren(ctx context.Context, parent contracts.Job, items []json.RawMessage, stamps []float64) error {
	batch := make([]any, 0, min(s.batch, len(items)))
	bodies := make([]bodyDoc, 0, min(s.batch, len(items)))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.insertBodies(ctx, bodies); err != nil {
			return fmt.Errorf("insert children: %w", err)
		}
		bodies = bodies[:0]
		res, err := s.jobs.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
		batch = batch[:0]
		if res != nil {
			// Counted as they go in, as the embedded store does, so that a
			// count of the jobs (Reconcile) always agrees; taking them
			// back uncounts them.
			s.countMove(ctx, parent.Tenant, "", contracts.StatePending, len(res.InsertedIDs))
		}
		if err != nil {
			return fmt.Errorf("insert children: %w", err)
		}
		return s.touchStaging(ctx, parent.ID)
	}
	for i, item := range items {
		c := parent.Child(i, item)
		if i < len(stamps) {
			c.FairAt = stamps[i]
		}
		d := newJobDoc(c)
		d.State = stateHeld
		batch = append(batch, d)
		if d.Body {
			bodies = append(bodies, newBodyDoc(c, s.now()))
		}
		if len(batch) == s.batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// releaseBelow releases the parent's children below index n that are
// still held (the admission's first ones, or those a process that died
// left behind).
func (s *Store) releaseBelow(ctx context.Context, parent string, n int, now time.Time) error {
	_, err := s.jobs.UpdateMany(ctx,
		bson.D{{Key: fParent, Value: parent}, {Key: fState, Value: stateHeld}, {Key: fItemIndex, Value: bson.D{{Key: "$lt", Value: n}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fState, Value: string(contracts.StatePending)},
			{Key: fReleased, Value: true}, {Key: fUpdatedAt, Value: millis(now)}}}})
	return err
}

// fanoutParent is what the fan-out rules read of a parent document.
func (d jobDoc) fanoutParent() store.FanoutParent {
	return store.FanoutParent{ID: d.ID, State: publicState(d.State), Window: d.Window, Released: d.ChildrenReleased,
		Counts: d.counts(), FailFast: d.FailFast, CancelRequested: d.CancelRequested}
}

// childEnded applies what store.EndChild decides of the parent of a child
// that just ended in state st, then store.FinishParent. Without
// transactions the change set is applied in this order, each step its own
// atomic update, so that a process that dies between two steps leaves the
// window narrower, never wider, and Reconcile (repairParents) repairs it:
//
//  1. the count, in the same update that reads the parent ($inc with the
//     document returned after it): two children ending at once each see
//     the other's count, so the last one sees every child ended;
//  2. a fail-fast cancel: the cursor moves to the end before any waiting
//     child is cancelled, so no release can slip in behind it
//     (cancelWaiting);
//  3. a release: the cursor's next index is taken before its child is
//     released, so each index is released once (releaseNext);
//  4. the parent's end, a compare-and-set on its active state: of two
//     callers that see it done, one ends it and frees its slots.
func (s *Store) childEnded(ctx context.Context, child jobDoc, st contracts.JobState, now time.Time) error {
	field := map[contracts.JobState]string{contracts.StateSucceeded: fChildrenSucceeded,
		contracts.StateFailed: fChildrenFailed, contracts.StateCancelled: fChildrenCancelled}[st]
	var p jobDoc
	err := s.jobs.FindOneAndUpdate(ctx, parentFilter(child.Parent),
		bson.D{{Key: "$inc", Value: bson.D{{Key: field, Value: 1}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&p)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil // the parent ended or is gone: nothing to count on
	case err != nil:
		return fmt.Errorf("count child %s on its parent: %w", child.ID, err)
	}
	// The parent was read with the child already counted (step 1): the
	// rule decides the rest from it.
	step := store.EndChild(p.fanoutParent(), true, child.ID, !child.Released, st, now)
	step.Count = ""
	return s.applyFanout(ctx, p, step, now)
}

// applyFanout applies a fan-out rule's change set to parent p in the order
// childEnded explains (its count already applied), then ends p when
// store.FinishParent says so.
func (s *Store) applyFanout(ctx context.Context, p jobDoc, step store.FanoutStep, now time.Time) error {
	if step.CancelWaiting != nil {
		var err error
		if p, err = s.cancelWaiting(ctx, p, *step.CancelWaiting); err != nil {
			return err
		}
	}
	if step.ReleaseNext {
		if err := s.releaseNext(ctx, p, now); err != nil {
			return err
		}
	}
	return s.finishParentIfDone(ctx, p, now)
}

// releaseNext releases the parent's next held child still waiting (one
// cancelled while held is stepped over), with the next stamp of the
// tenant's fair queue and a dispatch deadline store.FanoutWait from now.
func (s *Store) releaseNext(ctx context.Context, p jobDoc, now time.Time) error {
	var deadline time.Time
	if p.DispatchDeadline != nil {
		deadline = *p.DispatchDeadline
	}
	wait := store.FanoutWait(deadline, p.CreatedAt, p.RunAt)
	for {
		var cur jobDoc
		err := s.jobs.FindOneAndUpdate(ctx,
			append(parentFilter(p.ID), bson.E{Key: fChildrenReleased, Value: bson.D{{Key: "$lt", Value: p.ChildrenTotal}}}),
			bson.D{{Key: "$inc", Value: bson.D{{Key: fChildrenReleased, Value: 1}}}},
			// No projection: FerretDB's findAndModify has none.
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&cur)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			return nil // every child was released, or the parent ended
		case err != nil:
			return fmt.Errorf("take the next child of %s: %w", p.ID, err)
		}
		id := contracts.ChildID(p.ID, cur.ChildrenReleased-1)
		stamps, err := s.stampFairN(ctx, p.Tenant, p.Weight, 1)
		if err != nil {
			return err
		}
		res, err := s.jobs.UpdateOne(ctx, bson.D{{Key: fID, Value: id}, {Key: fState, Value: stateHeld}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fState, Value: string(contracts.StatePending)},
				{Key: fReleased, Value: true}, {Key: fFairAt, Value: stamps[0]},
				{Key: fDispatchDeadline, Value: millis(now.Add(wait))}, {Key: fUpdatedAt, Value: millis(now)}}}})
		if err != nil {
			return fmt.Errorf("release child %s: %w", id, err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
	}
}

// cancelWaiting applies a cancel cascade's CancelWaiting change ch
// (store.CancelWaitingChange) to parent p: it moves the cursor to the end,
// ends every child still waiting with ch and counts them, and asks the
// running children to stop (store.RequestCancelChange). It returns the
// parent as it is afterwards.
func (s *Store) cancelWaiting(ctx context.Context, p jobDoc, ch store.Change) (jobDoc, error) {
	if _, err := s.jobs.UpdateOne(ctx, parentFilter(p.ID),
		bson.D{{Key: "$set", Value: bson.D{{Key: fChildrenReleased, Value: p.ChildrenTotal}}}}); err != nil {
		return p, fmt.Errorf("close the window of %s: %w", p.ID, err)
	}
	res, err := s.jobs.UpdateMany(ctx,
		bson.D{{Key: fParent, Value: p.ID}, {Key: fState, Value: bson.D{{Key: "$in", Value: waitingStates}}}},
		buildUpdate(ch))
	if err != nil {
		return p, fmt.Errorf("cancel the waiting children of %s: %w", p.ID, err)
	}
	s.countMove(ctx, p.Tenant, contracts.StatePending, contracts.StateCancelled, int(res.ModifiedCount))
	if _, err := s.jobs.UpdateMany(ctx,
		bson.D{{Key: fParent, Value: p.ID}, {Key: fState, Value: string(contracts.StateRunning)}, {Key: fCancelRequested, Value: bson.D{{Key: "$ne", Value: true}}}},
		buildUpdate(store.RequestCancelChange(ch.Now))); err != nil {
		return p, fmt.Errorf("cancel the running children of %s: %w", p.ID, err)
	}
	var out jobDoc
	err = s.jobs.FindOneAndUpdate(ctx, bson.D{{Key: fID, Value: p.ID}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: fChildrenCancelled, Value: int(res.ModifiedCount)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if err != nil {
		return p, fmt.Errorf("count the cancelled children of %s: %w", p.ID, err)
	}
	return out, nil
}

// finishParentIfDone ends the parent as store.FinishParent says, when it
// says so (a compare-and-set on its active state: one caller wins), and
// frees its admission slots.
func (s *Store) finishParentIfDone(ctx context.Context, p jobDoc, now time.Time) error {
	if !p.counts().Done() {
		return nil
	}
	cur, err := s.jobs.Find(ctx, bson.D{{Key: fParent, Value: p.ID}, {Key: fState, Value: string(contracts.StateFailed)}},
		options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetLimit(contracts.MaxFailedChildren).
			SetProjection(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return fmt.Errorf("read the failed children of %s: %w", p.ID, err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("read the failed children of %s: %w", p.ID, err)
	}
	failed := make([]string, len(docs))
	for i, f := range docs {
		failed[i] = f.ID
	}
	end, ok := store.FinishParent(p.fanoutParent(), failed)
	if !ok {
		return nil
	}
	// The state it had before: pending or running, for the counters.
	var was struct {
		State string `bson:"state"`
	}
	err = s.jobs.FindOneAndUpdate(ctx, parentFilter(p.ID), unsetAlso(buildUpdate(end.Change(now)), fProgress)).Decode(&was)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil // another caller ended it
	case err != nil:
		return fmt.Errorf("finish parent %s: %w", p.ID, err)
	}
	s.countMove(ctx, p.Tenant, publicState(was.State), end.State, 1)
	return s.releaseHeld(ctx, heldBy(p.job()))
}

// unsetAlso is update u (buildUpdate's) that also unsets fields.
func unsetAlso(u bson.D, fields ...string) bson.D {
	more := make(bson.D, len(fields))
	for i, f := range fields {
		more[i] = bson.E{Key: f, Value: ""}
	}
	for i, e := range u {
		if e.Key == "$unset" {
			u[i].Value = append(e.Value.(bson.D), more...)
			return u
		}
	}
	return append(u, bson.E{Key: "$unset", Value: more})
}

// startParent marks a child's parent running (store.StartParentChange)
// when it is still pending; tenant is theirs.
func (s *Store) startParent(ctx context.Context, tenant, parent string, now time.Time) error {
	ch := store.StartParentChange(now)
	res, err := s.jobs.UpdateOne(ctx, bson.D{{Key: fID, Value: parent}, {Key: fState, Value: string(contracts.StatePending)}},
		buildUpdate(ch))
	if err != nil {
		return fmt.Errorf("start parent %s: %w", parent, err)
	}
	s.countMove(ctx, tenant, contracts.StatePending, ch.State, int(res.ModifiedCount))
	return nil
}

// CancelParent cancels a fan-out parent (see store.Store): it applies
// store.CancelFanout to the parent, marking it cancel_requested in the
// update that reads it (so that no child's end can release after it),
// then the rest of the change set as childEnded orders it.
func (s *Store) CancelParent(ctx context.Context, id string, now time.Time, reason string) (contracts.Job, []contracts.Job, error) {
	ctx = store.WithWriteOp(ctx, store.WriteCancel)
	op := "cancel parent " + id
	if now.IsZero() {
		now = time.Now()
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	var p jobDoc
	err := s.jobs.FindOneAndUpdate(ctx, parentFilter(id),
		bson.D{{Key: "$set", Value: bson.D{{Key: fCancelRequested, Value: true}, {Key: fUpdatedAt, Value: millis(now)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&p)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		j, gerr := s.Get(ctx, id)
		if gerr != nil {
			return contracts.Job{}, nil, gerr
		}
		if !j.IsParent() {
			return contracts.Job{}, nil, fmt.Errorf("mongo: %s: not a fan-out parent: %w", op, store.ErrBadTransition)
		}
		return j, nil, nil // already finished
	case err != nil:
		return contracts.Job{}, nil, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if step, ok := store.CancelFanout(p.fanoutParent(), reason, now); ok {
		// RequestCancel was applied with the read.
		if err := s.applyFanout(ctx, p, step, now); err != nil {
			return contracts.Job{}, nil, fmt.Errorf("mongo: %s: %w", op, err)
		}
	}
	running, err := s.findJobs(ctx, bson.D{{Key: fParent, Value: id}, {Key: fState, Value: string(contracts.StateRunning)}},
		options.Find().SetSort(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return contracts.Job{}, nil, fmt.Errorf("mongo: %s: read running children: %w", op, err)
	}
	out, err := s.Get(ctx, id)
	if err != nil {
		return contracts.Job{}, nil, err
	}
	return out, running, nil
}

// countRunning completes a parent's counts with its running children
// (store.ChildCountsWith; job() counts them as pending); other jobs are left alone.
func (s *Store) countRunning(ctx context.Context, j *contracts.Job) error {
	if j.Children == nil || j.State.Final() {
		return nil
	}
	n, err := s.jobs.CountDocuments(ctx, bson.D{{Key: fParent, Value: j.ID}, {Key: fState, Value: string(contracts.StateRunning)}})
	if err != nil {
		return fmt.Errorf("count the running children of %s: %w", j.ID, err)
	}
	c := store.ChildCountsWith(*j.Children, int(n))
	j.Children = &c
	return nil
}
