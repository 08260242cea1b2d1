package mongo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Hot and cold apart. A job's document in jobs is what its life changes
// and what the claim, the sweeps and the rules read: state, claim,
// worker, times, counts, options. Its cold part, a document of
// job_bodies keyed by the job's id, is what never changes after
// admission: the payload (a fan-out child's item) and the pinned inputs,
// the two fields of unbounded size. MongoDB rewrites a whole document on
// every update, and FerretDB keeps each one as a JSON text that every
// filter but {_id: x} parses: with the payload in the job's document,
// every claim parsed every pending job's payload and every update
// rewrote it.
//
// Written once, before the job. A body goes in before its job's document
// (Admit, AdmitBatch, a fan-out's parent and each batch of its children),
// and only for a job that has a payload or inputs; the job's document
// then says so (body: true), so that a read of a job without one asks
// for nothing. Without transactions a process that dies between the two
// leaves a body without its job, never a job without its body: Reconcile
// sweeps such orphans once they are older than the grace period
// (sweepBodies), as a body younger than that may belong to an admission
// still under way. Nothing after admission writes a body.
//
// Read by _id. Reads that hand a job out (Get, List, the claim's jobs,
// Stale, a dedup key's job, a parent's running children, the job
// Transition returns) fetch the bodies of the jobs they read with one
// query per batch (withBodies); the reads of a read-decide-write
// (Update, UpdateEach) are the job's document alone: without payload and
// inputs, as on the embedded store.
//
// Deleted after the job. Purge, a parent's children, a failed admission
// and a staged admission taken back delete the jobs first, then the
// bodies of those that are gone (dropBodies): a body is never deleted
// while its job is there.
//
// A document of a release before the split still carries payload and
// inputs itself, and no body flag: reads take them from it (see
// jobDoc.job). No migration at Open: rewriting every job's document
// there would be a full pass over the collection on every Open of every
// process until it ends, not atomic on FerretDB, and the old documents
// go by themselves with Purge.

// bodiesCollection holds the jobs' cold parts.
const bodiesCollection = "job_bodies"

// fBody is the job document's flag that it has a body.
const fBody = "body"

// bodyBatch bounds the ids of one query or delete of bodies, and the
// bodies one sweep looks at.
const bodyBatch = 1000

// bodyDoc is a job's cold part as job_bodies holds it. CreatedAt is when
// it was written (the store's clock), which the orphan sweep goes by.
type bodyDoc struct {
	ID        string     `bson:"_id"`
	Payload   string     `bson:"payload,omitempty"`
	Inputs    []inputDoc `bson:"inputs,omitempty"`
	CreatedAt time.Time  `bson:"created_at"`
}

// bodyIndexes are job_bodies' secondary indexes.
var bodyIndexes = []index{
	// The orphan sweep: bodies oldest first.
	{name: "created", keys: bson.D{{Key: fCreatedAt, Value: 1}, {Key: fID, Value: 1}}},
}

// hasBody reports whether a new job has a cold part to write.
func hasBody(j contracts.Job) bool { return len(j.Payload) > 0 || len(j.Inputs) > 0 }

// newBodyDoc is the body of a new job, written at.
func newBodyDoc(j contracts.Job, at time.Time) bodyDoc {
	return bodyDoc{ID: j.ID, Payload: string(j.Payload), Inputs: toInputDocs(j.Inputs), CreatedAt: millis(at)}
}

// fill sets a job's payload and inputs from its body.
func (b bodyDoc) fill(j *contracts.Job) {
	j.Payload, j.Inputs = rawJSON(b.Payload), fromInputDocs(b.Inputs)
}

// errIDTaken is the body of a new job's id held by a job of that id.
var errIDTaken = errors.New("a job with this id exists")

// refused reports whether insertBodies refused a body (errIDTaken,
// errBodyTaken) and wrote none of it: the body of that id is another's.
func refused(err error) bool { return errors.Is(err, errIDTaken) || errors.Is(err, errBodyTaken) }

// errBodyTaken is the body of a new job's id left by an admission that
// may still be under way: younger than the grace period, with no job.
var errBodyTaken = errors.New("an admission of this id is under way")

// insertBodies writes the bodies of new jobs in one command. A body of
// the same id already there (a duplicate key) is
//   - its job's, if that job exists: the new job's id is taken, and the
//     error says so, touching nothing;
//   - an orphan, if it is older than the grace period: it is replaced,
//     a compare-and-set on its time, so that a sweep deleting it or
//     another admission replacing it first makes this one look again;
//   - else errBodyTaken.
func (s *Store) insertBodies(ctx context.Context, bodies []bodyDoc) error {
	if len(bodies) == 0 {
		return nil
	}
	docs := make([]any, len(bodies))
	for i := range bodies {
		docs[i] = bodies[i]
	}
	_, err := s.bodies.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		return nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return fmt.Errorf("insert %d bodies: %w", len(bodies), err)
	}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we) || we.Index < 0 || we.Index >= len(bodies) {
			return fmt.Errorf("insert %d bodies: %w", len(bodies), err)
		}
		if rerr := s.replaceOrphanBody(ctx, bodies[we.Index]); rerr != nil {
			return rerr
		}
	}
	return nil
}

// replaceOrphanBody writes b over a body of its id that is there (see
// insertBodies).
func (s *Store) replaceOrphanBody(ctx context.Context, b bodyDoc) error {
	for range maxAdmitTries {
		in, err := s.exists(ctx, b.ID)
		switch {
		case err != nil:
			return fmt.Errorf("insert the body of %s: %w", b.ID, err)
		case in:
			return fmt.Errorf("insert the body of %s: %w", b.ID, errIDTaken)
		}
		var old bodyDoc
		err = s.bodies.FindOne(ctx, bson.D{{Key: fID, Value: b.ID}},
			options.FindOne().SetProjection(bson.D{{Key: fCreatedAt, Value: 1}})).Decode(&old)
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Swept meanwhile: insert it after all.
			if _, err := s.bodies.InsertOne(ctx, b); err == nil || !mongo.IsDuplicateKeyError(err) {
				if err != nil {
					return fmt.Errorf("insert the body of %s: %w", b.ID, err)
				}
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("insert the body of %s: %w", b.ID, err)
		}
		if !old.CreatedAt.Before(s.now().Add(-s.grace)) {
			return fmt.Errorf("insert the body of %s: %w", b.ID, errBodyTaken)
		}
		r, err := s.bodies.ReplaceOne(ctx, bson.D{{Key: fID, Value: b.ID}, {Key: fCreatedAt, Value: old.CreatedAt}}, b)
		if err != nil {
			return fmt.Errorf("replace the orphan body of %s: %w", b.ID, err)
		}
		if r.MatchedCount == 1 {
			return nil
		}
	}
	return fmt.Errorf("insert the body of %s: %w", b.ID, errBodyTaken)
}

// withBodies turns job documents into jobs, with the bodies of those that
// have one: one find by _id for a single job (a lookup FerretDB serves
// from its primary key), else one $in per bodyBatch jobs. A body that is
// missing is an error: its job was deleted meanwhile (a purge), or the
// store was written by hand.
func (s *Store) withBodies(ctx context.Context, docs []jobDoc) ([]contracts.Job, error) {
	jobs := make([]contracts.Job, len(docs))
	var want []string
	at := map[string]int{}
	for i, d := range docs {
		jobs[i] = d.job()
		if d.Body {
			want = append(want, d.ID)
			at[d.ID] = i
		}
	}
	if len(want) == 0 {
		return jobs, nil
	}
	for len(want) > 0 {
		ids := want[:min(len(want), bodyBatch)]
		want = want[len(ids):]
		var bodies []bodyDoc
		if len(ids) == 1 {
			var b bodyDoc
			err := s.bodies.FindOne(ctx, bson.D{{Key: fID, Value: ids[0]}}).Decode(&b)
			switch {
			case errors.Is(err, mongo.ErrNoDocuments):
			case err != nil:
				return nil, fmt.Errorf("read the body of %s: %w", ids[0], err)
			default:
				bodies = append(bodies, b)
			}
		} else {
			cur, err := s.bodies.Find(ctx, bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: ids}}}})
			if err != nil {
				return nil, fmt.Errorf("read %d bodies: %w", len(ids), err)
			}
			if err := cur.All(ctx, &bodies); err != nil {
				return nil, fmt.Errorf("read %d bodies: %w", len(ids), err)
			}
		}
		for _, b := range bodies {
			if i, ok := at[b.ID]; ok {
				b.fill(&jobs[i])
				delete(at, b.ID)
			}
		}
	}
	for id := range at {
		return nil, fmt.Errorf("the body of job %s is missing", id)
	}
	return jobs, nil
}

// withBody is withBodies of one document.
func (s *Store) withBody(ctx context.Context, d jobDoc) (contracts.Job, error) {
	jobs, err := s.withBodies(ctx, []jobDoc{d})
	if err != nil {
		return contracts.Job{}, err
	}
	return jobs[0], nil
}

// dropBodies deletes the bodies of ids whose jobs are not there, bodyBatch
// ids per command: a job's own delete comes first, so a body goes only
// once its job has gone (and a job of the same id admitted since keeps
// its own). It runs even when ctx has ended.
func (s *Store) dropBodies(ctx context.Context, ids []string) error {
	ctx, cancel := s.detached(ctx)
	defer cancel()
	for len(ids) > 0 {
		batch := ids[:min(len(ids), bodyBatch)]
		ids = ids[len(batch):]
		gone, err := s.absent(ctx, batch)
		if err != nil {
			return fmt.Errorf("delete bodies: %w", err)
		}
		if len(gone) == 0 {
			continue
		}
		if _, err := s.bodies.DeleteMany(ctx, bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: gone}}}}); err != nil {
			return fmt.Errorf("delete %d bodies: %w", len(gone), err)
		}
	}
	return nil
}

// absent returns those of ids that no job has.
func (s *Store) absent(ctx context.Context, ids []string) ([]string, error) {
	cur, err := s.jobs.Find(ctx, bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("look up %d ids: %w", len(ids), err)
	}
	var in []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &in); err != nil {
		return nil, fmt.Errorf("look up %d ids: %w", len(ids), err)
	}
	there := make(map[string]bool, len(in))
	for _, d := range in {
		there[d.ID] = true
	}
	out := make([]string, 0, len(ids)-len(in))
	for _, id := range ids {
		if !there[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// childIDs are the ids of the first n children of parent.
func childIDs(parent string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = contracts.ChildID(parent, i)
	}
	return out
}

// bodySweep is where the orphan sweep goes on from: the last body it
// looked at (zero: from the oldest). Each Store sweeps on its own.
type bodySweep struct {
	mu    sync.Mutex
	at    time.Time
	id    string
	moved bool
}

// sweepBodies deletes bodies with no job that were written before the
// grace period, looking at up to sweepLimit (bodyBatch) bodies, oldest first from
// where the last sweep stopped (wrapping around to the oldest once it
// reaches the grace period), and returns how many it deleted. A body
// deleted is one whose job was missing when looked up and whose time has
// not changed since (a compare-and-set on it: an admission replacing an
// orphan of its id writes a new time).
func (s *Store) sweepBodies(ctx context.Context) (int, error) {
	s.sweep.mu.Lock()
	defer s.sweep.mu.Unlock()
	cutoff := millis(s.now().Add(-s.grace))
	filter := bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$lt", Value: cutoff}}}}
	if s.sweep.moved {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$gt", Value: s.sweep.at}}}},
			bson.D{{Key: fCreatedAt, Value: s.sweep.at}, {Key: fID, Value: bson.D{{Key: "$gt", Value: s.sweep.id}}}},
		}})
	}
	cur, err := s.bodies.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: fCreatedAt, Value: 1}, {Key: fID, Value: 1}}).
		SetLimit(int64(s.sweepLimit)).
		SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fCreatedAt, Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("find old bodies: %w", err)
	}
	var old []bodyDoc
	if err := cur.All(ctx, &old); err != nil {
		return 0, fmt.Errorf("find old bodies: %w", err)
	}
	if len(old) < s.sweepLimit {
		s.sweep.moved = false // the next sweep starts from the oldest again
	} else {
		last := old[len(old)-1]
		s.sweep.at, s.sweep.id, s.sweep.moved = last.CreatedAt, last.ID, true
	}
	if len(old) == 0 {
		return 0, nil
	}
	ids := make([]string, len(old))
	when := make(map[string]time.Time, len(old))
	for i, b := range old {
		ids[i] = b.ID
		when[b.ID] = b.CreatedAt
	}
	gone, err := s.absent(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("sweep bodies: %w", err)
	}
	swept := 0
	for _, id := range gone {
		r, err := s.bodies.DeleteOne(ctx, bson.D{{Key: fID, Value: id}, {Key: fCreatedAt, Value: when[id]}})
		if err != nil {
			return swept, fmt.Errorf("delete the orphan body of %s: %w", id, err)
		}
		swept += int(r.DeletedCount)
	}
	return swept, nil
}
