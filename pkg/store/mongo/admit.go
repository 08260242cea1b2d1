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
)

// maxAdmitTries bounds the rounds of an admission whose dedup key was
// taken, then freed again, while it ran.
const maxAdmitTries = 8

// Admit inserts job if the caps allow it:
//
//  1. when job.Key is set and the tenant has an active job with that key,
//     that job is returned with store.Joined;
//  2. a slot is taken in the global, then in the tenant's, counter (see
//     reserve); no room is store.RejectedGlobal or store.RejectedTenant;
//  3. the job is inserted. If the insert fails the slots are given back.
//     A duplicate active key means another admission of the same key won
//     the race: its job is returned with store.Joined.
//
// Joined and rejected admissions write no job. The counters are exact
// whenever no admission is half-way; while one is, another may see its
// slot taken and be rejected although that admission will give it back.
//
// The job must be pending at attempt 0 and have an id; a zero CreatedAt is
// taken as now and a zero UpdatedAt as CreatedAt. The returned job is the
// one stored: times in UTC, cut to the millisecond.
func (s *Store) Admit(ctx context.Context, job contracts.Job, caps store.Caps) (contracts.Job, store.Admission, error) {
	ctx = store.WithWriteOp(ctx, store.WriteAdmit)
	op := "admit job " + job.ID
	if err := store.CheckNewJob(job); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if err := store.CheckFanout(&job, nil); err != nil {
		return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
	}
	if job.CreatedAt.IsZero() {
		job.CreatedAt = time.Now()
	}
	if job.UpdatedAt.IsZero() {
		job.UpdatedAt = job.CreatedAt
	}
	doc := newJobDoc(job)
	ctx, cancel := s.call(ctx)
	defer cancel()

	for range maxAdmitTries {
		if job.Key != "" {
			j, found, err := s.activeByKey(ctx, job.Tenant, job.Key)
			if err != nil {
				return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
			}
			if found {
				return j, store.Joined, nil
			}
		}

		adm, err := s.reserve(ctx, caps, job)
		if err != nil {
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
		}
		if adm != store.Admitted {
			// The key's job may have been admitted since the lookup.
			if job.Key != "" {
				if j, found, err := s.activeByKey(ctx, job.Tenant, job.Key); err == nil && found {
					return j, store.Joined, nil
				}
			}
			return contracts.Job{}, adm, nil
		}

		if doc.FairAt, err = s.stampFair(ctx, job.Tenant, caps.Weight); err != nil {
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, s.afterFailedInsert(ctx, job, err))
		}
		// The body first (body.go): a job is never without it.
		var body bodyDoc
		if doc.Body {
			body = newBodyDoc(job, s.now())
			if err := s.insertBodies(ctx, []bodyDoc{body}); err != nil {
				if refused(err) {
					// Nothing of this admission went in but its slots.
					if gerr := s.releaseHeld(ctx, heldBy(job)); gerr != nil {
						err = errors.Join(err, gerr)
					}
					return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, err)
				}
				return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, s.afterFailedInsert(ctx, job, err))
			}
		}
		_, err = s.jobs.InsertOne(ctx, doc)
		if err == nil {
			s.countMove(ctx, job.Tenant, "", contracts.StatePending, 1)
			out := doc.job()
			if doc.Body {
				body.fill(&out)
			}
			return out, store.Admitted, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, s.afterFailedJobInsert(ctx, job, err))
		}

		// A duplicate id or a duplicate active key: nothing was inserted.
		// The body written goes unless a job of that id holds it.
		if gerr := s.releaseHeld(ctx, heldBy(job)); gerr != nil {
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, errors.Join(err, gerr))
		}
		if doc.Body {
			if gerr := s.dropBodies(ctx, []string{job.ID}); gerr != nil {
				return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, errors.Join(err, gerr))
			}
		}
		if job.Key != "" {
			j, found, lerr := s.activeByKey(ctx, job.Tenant, job.Key)
			if lerr != nil {
				return contracts.Job{}, 0, fmt.Errorf("mongo: %s: %w", op, lerr)
			}
			if found {
				return j, store.Joined, nil
			}
		}
		exists, lerr := s.exists(ctx, job.ID)
		switch {
		case lerr != nil:
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: insert: %w", op, errors.Join(err, lerr))
		case exists:
			return contracts.Job{}, 0, fmt.Errorf("mongo: %s: a job with this id exists: %w", op, err)
		}
		// The key was freed between the insert and the lookup: again.
	}
	return contracts.Job{}, 0, fmt.Errorf("mongo: %s: dedup key %q kept changing hands", op, job.Key)
}

// afterFailedJobInsert decides what to do with the slots and the body of
// an admission whose job insert failed with something other than a
// duplicate key, and returns the error to report.
//
// Such a failure does not say whether the job went in, nor whether it
// still will: a network error or a timeout may come after the server
// wrote it, or while the insert is still on its way to the server or
// running there (the caller gave up on it, the server did not). A read
// that finds no job proves nothing then: giving the slots back on its
// word let the insert land afterwards holding no slot, and the cap be
// passed (and the body deleted under it). So unless the error says the
// insert was not applied (unapplied: then afterFailedInsert), the slots
// and the body stay: a counter that is too high only rejects a little
// early until Reconcile lowers it, and an orphan body is Reconcile's to
// delete once the grace period has passed. A plain job that is there
// already is counted (a fan-out parent is counted with its children,
// which this one has not); one that lands later, Reconcile counts. The
// caller gets the error either way: the job may or may not be admitted.
func (s *Store) afterFailedJobInsert(ctx context.Context, job contracts.Job, insertErr error) error {
	if unapplied(insertErr) {
		return s.afterFailedInsert(ctx, job, insertErr)
	}
	dctx, cancel := s.detached(ctx)
	exists, _ := s.exists(dctx, job.ID)
	cancel()
	if exists && !job.IsParent() {
		s.countMove(ctx, job.Tenant, "", contracts.StatePending, 1)
	}
	return insertErr
}

// afterFailedInsert decides what to do with the slots of an admission
// that stopped before its job insert was sent (or whose insert the server
// refused), and returns the error to report.
//
// The slots go back only when a fresh read shows the job is not there;
// otherwise (it is there, or the read fails too) they stay taken. A
// counter that is too high only rejects a little early until Reconcile
// lowers it, where one that is too low would admit past the cap. A job
// that is not there has its body deleted (if it went in) before its slots
// are given back. A plain job that is there is counted (a fan-out parent
// is counted with its children, which this one has not).
func (s *Store) afterFailedInsert(ctx context.Context, job contracts.Job, insertErr error) error {
	dctx, cancel := s.detached(ctx)
	exists, err := s.exists(dctx, job.ID)
	cancel()
	if exists && !job.IsParent() {
		s.countMove(ctx, job.Tenant, "", contracts.StatePending, 1)
	}
	if err != nil || exists {
		return insertErr
	}
	// Not there: its body (if it went in) goes, then its slots.
	if err := s.dropBodies(ctx, []string{job.ID}); err != nil {
		return errors.Join(insertErr, err)
	}
	if err := s.releaseHeld(ctx, heldBy(job)); err != nil {
		return errors.Join(insertErr, err)
	}
	return insertErr
}

// activeByKey finds the tenant's active job with that dedup key.
func (s *Store) activeByKey(ctx context.Context, tenant, key string) (contracts.Job, bool, error) {
	var d jobDoc
	err := s.jobs.FindOne(ctx, bson.D{{Key: fActiveKey, Value: activeKey(tenant, key)}}).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return contracts.Job{}, false, nil
	case err != nil:
		return contracts.Job{}, false, fmt.Errorf("look up key %q: %w", key, err)
	}
	j, err := s.withBody(ctx, d)
	if err != nil {
		return contracts.Job{}, false, fmt.Errorf("look up key %q: %w", key, err)
	}
	return j, true, nil
}

// exists says whether a job has that id.
func (s *Store) exists(ctx context.Context, id string) (bool, error) {
	err := s.jobs.FindOne(ctx, bson.D{{Key: fID, Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: fID, Value: 1}})).Err()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up id: %w", err)
	}
	return true, nil
}

// AdmitBatch admits every request as Admit would, one after the other (a
// job sees the jobs admitted before it). It is not one transaction: an
// error stops the batch and leaves the jobs before it admitted; the error
// says which job failed.
func (s *Store) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) ([]store.AdmitResult, error) {
	ctx = store.WithWriteOp(ctx, store.WriteAdmit)
	out := make([]store.AdmitResult, 0, len(reqs))
	for _, r := range reqs {
		if len(r.Items) > 0 {
			j, adm, err := s.admitFanout(ctx, r)
			if err != nil {
				return out, err
			}
			out = append(out, store.AdmitResult{Job: j, Admission: adm})
			continue
		}
		j, adm, err := s.Admit(ctx, r.Job, r.Caps)
		if err != nil {
			return out, err
		}
		out = append(out, store.AdmitResult{Job: j, Admission: adm})
	}
	return out, nil
}
