package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// The statements of a heartbeat (see keyed). One query reads every lease's
// job, first from the read pool: when no lease needs a write (see
// store.DecideLease) that read is the answer. Otherwise the write
// transaction reads them again; it holds the write lock, so what it read stays
// true until the updates, which change the rows it read by their rowids
// (no second lookup by id): one UPDATE for the promotions, one for the
// renewals.
var (
	leaseStateQuery, leaseStatesQuery = idQueries(`jobs.rowid, id, state, attempt, worker, cancel_requested,
			tenant, kind, runs, created_at, parent, heartbeat_at`)
	// What the read from the read pool needs of each job: store.DecideLease's
	// view and the cancel request, 6 columns of the 12 (another quarter
	// less time per lease in BenchmarkStartHeartbeat).
	leaseViewQuery, leaseViewsQuery = idQueries(`id, state, attempt, worker, cancel_requested, heartbeat_at`)
	// The leases' rows change at ?1.
	renewOneQuery, renewQuery = keyedQueries(`UPDATE jobs SET heartbeat_at = ?1 WHERE `, `rowid`, `?2`, ``)
	// OR ROLLBACK: no statement journal (see claimQuery).
	promoteOneQuery, promoteQuery = keyedQueries(`UPDATE OR ROLLBACK jobs SET state = 'running', worker = ?2,
			started_at = ?1, heartbeat_at = ?1, updated_at = ?1, runs = runs + 1, claim_until = NULL WHERE `, `rowid`, `?3`, ``)
)

// leaseJob is what a heartbeat reads of a lease's job.
type leaseJob struct {
	rowid   int64
	state   contracts.JobState
	attempt int64
	worker  string
	cancel  bool
	tenant  string
	kind    string
	runs    int
	created int64
	parent  string
	// beat is the stored heartbeat, 0 when there is none.
	beat int64
	// renewed is set once the lease is in the heartbeat's renewals.
	renewed bool
}

// view is the job as store.DecideLease reads it.
func (j *leaseJob) view() store.LeaseView {
	v := store.LeaseView{State: j.state, Claim: j.attempt, Worker: j.worker}
	if j.beat != 0 {
		v.HeartbeatAt = fromNanos(j.beat)
	}
	return v
}

// decide is store.DecideLease of lease l of job j (nil: missing).
func decide(j *leaseJob, l contracts.Lease, workerID string, now time.Time, renewAfter time.Duration) store.LeaseAction {
	if j == nil {
		return store.LeaseLost
	}
	return store.DecideLease(j.view(), l, workerID, now, renewAfter)
}

// leaseJobs reads the jobs of leases with k, by id; a missing job is absent.
func leaseJobs(ctx context.Context, tx *sql.Tx, k keyed, leases []contracts.Lease) (map[string]*leaseJob, error) {
	return readLeases(ctx, tx, k, leases, func(j *leaseJob, id, state *string, beat *sql.NullInt64) []any {
		return []any{&j.rowid, id, state, &j.attempt, &j.worker, &j.cancel, &j.tenant, &j.kind, &j.runs, &j.created, &j.parent, beat}
	})
}

// leaseViews reads with k (leaseViewQuery) what heartbeatRead needs of
// the jobs of leases, by id; a missing job is absent.
func leaseViews(ctx context.Context, tx *sql.Tx, k keyed, leases []contracts.Lease) (map[string]*leaseJob, error) {
	return readLeases(ctx, tx, k, leases, func(j *leaseJob, id, state *string, beat *sql.NullInt64) []any {
		return []any{id, state, &j.attempt, &j.worker, &j.cancel, beat}
	})
}

// readLeases runs k over the jobs of leases and scans each row into the
// destinations dest gives, in k's column order; a missing job is absent.
func readLeases(ctx context.Context, tx *sql.Tx, k keyed, leases []contracts.Lease,
	dest func(j *leaseJob, id, state *string, beat *sql.NullInt64) []any) (map[string]*leaseJob, error) {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.JobID
	}
	return byID(ctx, tx, k, ids, func(rows *sql.Rows) (string, *leaseJob, error) {
		var (
			j         leaseJob
			id, state string
			beat      sql.NullInt64
		)
		err := rows.Scan(dest(&j, &id, &state, &beat)...)
		j.state = contracts.JobState(state)
		j.beat = beat.Int64
		return id, &j, err
	})
}

// heartbeatRead sorts leases from the read pool when none of them needs a
// write: it returns the outcome and true then, and false when a lease is to
// be promoted or renewed (or the read statements are not prepared).
func (s *Store) heartbeatRead(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time, renewAfter time.Duration) (store.HeartbeatOutcome, bool, error) {
	var out store.HeartbeatOutcome
	// Prepared before the transaction: preparing may need a connection.
	one, err := s.rc.get(ctx, leaseViewQuery)
	if err != nil {
		return out, false, fmt.Errorf("sqlite: heartbeat of worker %s: %w", workerID, err)
	}
	many, err := s.rc.get(ctx, leaseViewsQuery)
	if err != nil {
		return out, false, fmt.Errorf("sqlite: heartbeat of worker %s: %w", workerID, err)
	}
	if one == nil || many == nil {
		return out, false, nil
	}
	ok := true
	err = s.read(ctx, "heartbeat of worker "+workerID, func(tx *sql.Tx) error {
		jobs, err := leaseViews(ctx, tx, keyed{one: one, many: many}, leases)
		if err != nil {
			return fmt.Errorf("read leases: %w", err)
		}
		for _, l := range leases {
			j := jobs[l.JobID]
			switch decide(j, l, workerID, now, renewAfter) {
			case store.LeaseKeep:
				out.Kept = append(out.Kept, l)
				if j.cancel {
					out.Cancel = append(out.Cancel, l)
				}
			case store.LeaseLost:
				out.Lost = append(out.Lost, l)
			default:
				ok = false
				return nil
			}
		}
		return nil
	})
	if err != nil || !ok {
		return store.HeartbeatOutcome{}, false, err
	}
	return out, true, nil
}

// Heartbeat sorts workerID's leases as store.DecideLease says. It reads
// them first from the read pool; when none is to be promoted or renewed
// that read is the answer and the write lock is not taken. Otherwise one
// write transaction reads and sorts them again:
//
//   - running at that attempt on workerID: kept without a write while the
//     stored heartbeat is younger than renewAfter (Kept), else
//     heartbeat_at = now (Renewed);
//   - pending at that attempt (≥ 1, a dispatch claim the worker accepted,
//     whatever claim_until says): now running on workerID, started and
//     heartbeat at now, one more run, claim cleared (Promoted);
//   - anything else — another attempt or worker, a final or missing job —
//     is Lost.
//
// Renewed, kept and promoted leases whose job has a cancel request are
// also in Cancel. A zero now is taken as the current time.
func (s *Store) Heartbeat(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time, renewAfter time.Duration) (store.HeartbeatOutcome, error) {
	var out store.HeartbeatOutcome
	if len(leases) == 0 {
		return out, nil
	}
	if now.IsZero() {
		now = time.Now()
	}
	out, done, err := s.heartbeatRead(ctx, workerID, leases, now, renewAfter)
	if err != nil || done {
		return out, err
	}
	at := now.UnixNano()
	err = s.writeUrgent(ctx, store.WriteHeartbeat, "heartbeat of worker "+workerID, func(tx *sql.Tx) error {
		out = store.HeartbeatOutcome{}
		jobs, err := leaseJobs(ctx, tx, s.ws.leases, leases)
		if err != nil {
			return fmt.Errorf("read leases: %w", err)
		}
		var renew, promote rowids
		parentsStarted := map[string]bool{} // parents marked running in this heartbeat
		for _, l := range leases {
			j := jobs[l.JobID]
			switch decide(j, l, workerID, now, renewAfter) {
			case store.LeaseLost:
				out.Lost = append(out.Lost, l)
				continue
			case store.LeaseKeep:
				out.Kept = append(out.Kept, l)
			case store.LeaseRenew:
				if !j.renewed {
					renew.add(j.rowid)
					j.renewed = true
				}
				out.Renewed = append(out.Renewed, l)
			case store.LeasePromote:
				promote.add(j.rowid)
				s.countMove(j.tenant, contracts.StatePending, contracts.StateRunning, 1)
				if j.parent != "" && !parentsStarted[j.parent] {
					if err := s.startParent(ctx, tx, j.tenant, j.parent, now); err != nil {
						return err
					}
					parentsStarted[j.parent] = true
				}
				started := fromNanos(at)
				out.Promoted = append(out.Promoted, l)
				out.Started = append(out.Started, contracts.Job{
					ID: l.JobID, Tenant: j.tenant, Kind: j.kind, State: contracts.StateRunning, Claim: l.Claim,
					Attempt: j.runs + 1, Worker: workerID, CancelRequested: j.cancel, Parent: j.parent,
					CreatedAt: fromNanos(j.created), UpdatedAt: started, StartedAt: &started, HeartbeatAt: &started,
				})
				// The same lease twice in one heartbeat: the second finds
				// the job as the first left it.
				// Renewed, not kept, if given again: its stored heartbeat
				// is the one written now.
				j.state, j.worker, j.runs, j.beat = contracts.StateRunning, workerID, j.runs+1, 0
			}
			if j.cancel {
				out.Cancel = append(out.Cancel, l)
			}
		}
		// A lease given twice is promoted, then renewed: in that order.
		if err := promote.exec(ctx, tx, s.ws.promote, at, workerID); err != nil {
			return fmt.Errorf("promote %d leases: %w", promote.n, err)
		}
		if err := renew.exec(ctx, tx, s.ws.renew, at); err != nil {
			return fmt.Errorf("renew %d leases: %w", renew.n, err)
		}
		return nil
	})
	if err != nil {
		return store.HeartbeatOutcome{}, err
	}
	return out, nil
}
