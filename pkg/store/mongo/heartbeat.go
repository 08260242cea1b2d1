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

// Heartbeat sorts workerID's leases as store.DecideLease says. One query
// reads every lease's job; a lease that needs no write is answered from
// that read (Kept or Lost), each other one is one compare-and-set:
//
//   - running at that attempt on workerID: kept without a write while the
//     stored heartbeat is younger than renewAfter (Kept), else
//     heartbeat_at = now (Renewed);
//   - pending at that attempt (≥ 1, a dispatch claim the worker accepted,
//     whatever claim_until says): now running on workerID, started and
//     heartbeat at now, one more run, claim removed (Promoted);
//   - anything else — another attempt or worker, a final or missing job —
//     is Lost.
//
// A lease is first tried as a renewal, then as a promotion, then, when a
// concurrent heartbeat of the same worker promoted it in between, as a
// renewal again; each is one findOneAndUpdate, so a lease is promoted at
// most once however many heartbeats race, and never reported lost to the
// worker it was just promoted for. A lease read as lost cannot be this
// worker's again (a claim only grows). Renewed, kept and promoted leases
// whose job has a cancel request are also in Cancel. A zero now is taken
// as the current time.
//
// On an error the leases already sorted have been written; the outcome is
// not returned, and the worker's next heartbeat sorts them again (renewing
// twice is harmless, and a promoted lease is then renewed).
func (s *Store) Heartbeat(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time, renewAfter time.Duration) (store.HeartbeatOutcome, error) {
	ctx = store.WithWriteOp(ctx, store.WriteHeartbeat)
	var out store.HeartbeatOutcome
	if len(leases) == 0 {
		return out, nil
	}
	if now.IsZero() {
		now = time.Now()
	}
	at := millis(now)
	ctx, cancel := s.call(ctx)
	defer cancel()

	// No projection: FerretDB's findAndModify has none, and a job document
	// is small.
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	renew := bson.D{{Key: "$set", Value: bson.D{{Key: fHeartbeatAt, Value: at}}}}
	promote := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fState, Value: string(contracts.StateRunning)},
			{Key: fWorker, Value: workerID},
			{Key: fStartedAt, Value: at},
			{Key: fHeartbeatAt, Value: at},
			{Key: fUpdatedAt, Value: at},
		}},
		{Key: "$inc", Value: bson.D{{Key: fRuns, Value: 1}}},
		{Key: "$unset", Value: bson.D{{Key: fClaimUntil, Value: ""}}},
	}

	// Renewals read back only the cancel flag; a job document carries its
	// payload, which a heartbeat has no use for.
	renewLease := func(l contracts.Lease) (leaseView, bool, error) {
		var v leaseView
		ok, err := s.leaseCAS(ctx, opts, bson.D{
			{Key: fID, Value: l.JobID},
			{Key: fState, Value: string(contracts.StateRunning)},
			{Key: fClaim, Value: l.Claim},
			{Key: fWorker, Value: workerID},
		}, renew, &v)
		if err != nil {
			return v, false, fmt.Errorf("mongo: heartbeat of worker %s: renew lease %s/%d: %w", workerID, l.JobID, l.Claim, err)
		}
		return v, ok, nil
	}

	// The promotions are counted once, whatever way the call ends.
	promoted := store.StateCounts{}
	defer func() { s.addStateCounts(ctx, promoted) }()

	read, err := s.leaseViews(ctx, leases)
	if err != nil {
		return store.HeartbeatOutcome{}, fmt.Errorf("mongo: heartbeat of worker %s: read leases: %w", workerID, err)
	}
	for _, l := range leases {
		r := read[l.JobID]
		switch store.DecideLease(r.view(), l, workerID, now, renewAfter) {
		case store.LeaseKeep:
			out.Kept = append(out.Kept, l)
			if r.CancelRequested {
				out.Cancel = append(out.Cancel, l)
			}
			continue
		case store.LeaseLost:
			out.Lost = append(out.Lost, l)
			continue
		}
		v, ok, err := renewLease(l)
		if err != nil {
			return store.HeartbeatOutcome{}, err
		}
		if ok {
			out.Renewed = append(out.Renewed, l)
		} else if l.Claim >= 1 {
			var d jobDoc
			ok, err = s.leaseCAS(ctx, opts, bson.D{
				{Key: fID, Value: l.JobID},
				{Key: fState, Value: string(contracts.StatePending)},
				{Key: fClaim, Value: l.Claim},
			}, promote, &d)
			if err != nil {
				return store.HeartbeatOutcome{}, fmt.Errorf("mongo: heartbeat of worker %s: promote lease %s/%d: %w", workerID, l.JobID, l.Claim, err)
			}
			if ok {
				promoted.Apply(store.StateDeltas(d.Tenant, contracts.StatePending, contracts.StateRunning, 1)...)
				if d.Parent != "" {
					// Best effort: the parent also starts with its next child.
					_ = s.startParent(ctx, d.Tenant, d.Parent, now)
				}
				job := d.job()
				job.Payload = nil
				v.CancelRequested = job.CancelRequested
				out.Promoted = append(out.Promoted, l)
				out.Started = append(out.Started, job)
			} else {
				// A concurrent heartbeat of this worker (its start
				// heartbeat and a periodic or retried one, at two
				// scheduler replicas) may have promoted the claim between
				// the two steps above: then it is this worker's, renewed.
				if v, ok, err = renewLease(l); err != nil {
					return store.HeartbeatOutcome{}, err
				}
				if ok {
					out.Renewed = append(out.Renewed, l)
				}
			}
		}
		if !ok {
			out.Lost = append(out.Lost, l)
			continue
		}
		if v.CancelRequested {
			out.Cancel = append(out.Cancel, l)
		}
	}
	return out, nil
}

// leaseView is what a renewal reads back of a job.
type leaseView struct {
	CancelRequested bool `bson:"cancel_requested"`
}

// leaseRead is what a heartbeat reads of a lease's job before it writes.
type leaseRead struct {
	ID              string     `bson:"_id"`
	State           string     `bson:"state"`
	Claim           int64      `bson:"attempt"`
	Worker          string     `bson:"worker,omitempty"`
	HeartbeatAt     *time.Time `bson:"heartbeat_at,omitempty"`
	CancelRequested bool       `bson:"cancel_requested"`
}

// view is the job as store.DecideLease reads it; the zero leaseRead is a
// missing job.
func (r leaseRead) view() store.LeaseView {
	v := store.LeaseView{State: contracts.JobState(r.State), Claim: r.Claim, Worker: r.Worker}
	if r.HeartbeatAt != nil {
		v.HeartbeatAt = *r.HeartbeatAt
	}
	return v
}

// leaseViews reads the jobs of leases in one query, by id; a missing job
// is absent.
func (s *Store) leaseViews(ctx context.Context, leases []contracts.Lease) (map[string]leaseRead, error) {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.JobID
	}
	cur, err := s.jobs.Find(ctx, bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fState, Value: 1}, {Key: fClaim, Value: 1},
			{Key: fWorker, Value: 1}, {Key: fHeartbeatAt, Value: 1}, {Key: fCancelRequested, Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []leaseRead
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[string]leaseRead, len(docs))
	for _, d := range docs {
		out[d.ID] = d
	}
	return out, nil
}

// leaseCAS applies update to the job filter matches, if any, and decodes
// what it reads back into v.
func (s *Store) leaseCAS(ctx context.Context, opts *options.FindOneAndUpdateOptionsBuilder, filter, update bson.D, v any) (bool, error) {
	err := s.jobs.FindOneAndUpdate(ctx, filter, update, opts).Decode(v)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}
