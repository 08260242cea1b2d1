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
// job; the write transaction holds the write lock, so what it read stays
// true until the updates, which change the rows it read by their rowids
// (no second lookup by id): one UPDATE for the promotions, one for the
// renewals.
var (
	leaseStateQuery, leaseStatesQuery = keyedQueries(`SELECT rowid, id, state, attempt, worker, cancel_requested,
			tenant, kind, runs, created_at, parent FROM jobs WHERE `, `id`, `?`, ``)
	// The leases' rows change at ?1.
	renewOneQuery, renewQuery     = keyedQueries(`UPDATE jobs SET heartbeat_at = ?1 WHERE `, `rowid`, `?2`, ``)
	promoteOneQuery, promoteQuery = keyedQueries(`UPDATE jobs SET state = 'running', worker = ?2,
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
	// renewed is set once the lease is in the heartbeat's renewals.
	renewed bool
}

// leaseJobs reads the jobs of leases, by id; a missing job is absent.
func (s *Store) leaseJobs(ctx context.Context, tx *sql.Tx, leases []contracts.Lease) (map[string]*leaseJob, error) {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.JobID
	}
	return byID(ctx, tx, s.ws.leases, ids, func(rows *sql.Rows) (string, *leaseJob, error) {
		var (
			j     leaseJob
			id    string
			state string
		)
		err := rows.Scan(&j.rowid, &id, &state, &j.attempt, &j.worker, &j.cancel, &j.tenant, &j.kind, &j.runs, &j.created, &j.parent)
		j.state = contracts.JobState(state)
		return id, &j, err
	})
}

// Heartbeat sorts workerID's leases in one write transaction:
//
//   - running at that attempt on workerID: heartbeat_at = now (Renewed);
//   - pending at that attempt (≥ 1, a dispatch claim the worker accepted,
//     whatever claim_until says): now running on workerID, started and
//     heartbeat at now, one more run, claim cleared (Promoted);
//   - anything else — another attempt or worker, a final or missing job —
//     is Lost.
//
// Renewed and promoted leases whose job has a cancel request are also in
// Cancel. A zero now is taken as the current time.
func (s *Store) Heartbeat(ctx context.Context, workerID string, leases []contracts.Lease, now time.Time) (store.HeartbeatOutcome, error) {
	var out store.HeartbeatOutcome
	if len(leases) == 0 {
		return out, nil
	}
	if now.IsZero() {
		now = time.Now()
	}
	at := now.UnixNano()
	err := s.writeUrgent(ctx, store.WriteHeartbeat, "heartbeat of worker "+workerID, func(tx *sql.Tx) error {
		out = store.HeartbeatOutcome{}
		jobs, err := s.leaseJobs(ctx, tx, leases)
		if err != nil {
			return fmt.Errorf("read leases: %w", err)
		}
		var renew, promote rowids
		parentsStarted := map[string]bool{} // parents marked running in this heartbeat
		for _, l := range leases {
			j, ok := jobs[l.JobID]
			if !ok {
				out.Lost = append(out.Lost, l)
				continue
			}
			switch {
			case j.attempt != l.Claim:
				out.Lost = append(out.Lost, l)
				continue
			case j.state == contracts.StateRunning && j.worker == workerID:
				if !j.renewed {
					renew.add(j.rowid)
					j.renewed = true
				}
				out.Renewed = append(out.Renewed, l)
			case j.state == contracts.StatePending && j.attempt > 0:
				promote.add(j.rowid)
				if j.parent != "" && !parentsStarted[j.parent] {
					if err := s.startParent(ctx, tx, j.parent, now); err != nil {
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
				j.state, j.worker, j.runs = contracts.StateRunning, workerID, j.runs+1
			default:
				out.Lost = append(out.Lost, l)
				continue
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
