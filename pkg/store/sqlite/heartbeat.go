package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// The statements of a heartbeat, one lease at a time. The write
// transaction holds the write lock, so what leaseStateQuery reads stays true
// until the update, which changes the row read by its rowid (no second
// lookup by id).
const (
	leaseStateQuery = `SELECT rowid, state, attempt, worker, cancel_requested, tenant, kind, runs, created_at, parent FROM jobs WHERE id = ?`
	renewQuery      = `UPDATE jobs SET heartbeat_at = ? WHERE rowid = ?`
	promoteQuery    = `UPDATE jobs SET state = 'running', worker = ?,
			started_at = ?, heartbeat_at = ?, updated_at = ?, runs = runs + 1, claim_until = NULL
		WHERE rowid = ?`
)

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
	err := s.writeUrgent(ctx, "heartbeat of worker "+workerID, func(tx *sql.Tx) error {
		out = store.HeartbeatOutcome{}
		look := tx.StmtContext(ctx, s.ws.leaseState)
		renew := tx.StmtContext(ctx, s.ws.renew)
		promote := tx.StmtContext(ctx, s.ws.promote)
		parentsStarted := map[string]bool{} // parents marked running in this heartbeat
		for _, l := range leases {
			var (
				rowid   int64
				state   string
				attempt int64
				worker  string
				cancel  bool
				tenant  string
				kind    string
				runs    int
				created int64
				parent  string
			)
			err := look.QueryRowContext(ctx, l.JobID).Scan(&rowid, &state, &attempt, &worker, &cancel, &tenant, &kind, &runs, &created, &parent)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				out.Lost = append(out.Lost, l)
				continue
			case err != nil:
				return fmt.Errorf("read lease %s/%d: %w", l.JobID, l.Attempt, err)
			}
			switch {
			case attempt != l.Attempt:
				out.Lost = append(out.Lost, l)
				continue
			case contracts.JobState(state) == contracts.StateRunning && worker == workerID:
				if _, err := renew.ExecContext(ctx, at, rowid); err != nil {
					return fmt.Errorf("renew lease %s/%d: %w", l.JobID, l.Attempt, err)
				}
				out.Renewed = append(out.Renewed, l)
			case contracts.JobState(state) == contracts.StatePending && attempt > 0:
				if _, err := promote.ExecContext(ctx, workerID, at, at, at, rowid); err != nil {
					return fmt.Errorf("promote lease %s/%d: %w", l.JobID, l.Attempt, err)
				}
				if parent != "" && !parentsStarted[parent] {
					if err := s.startParent(ctx, tx, parent, now); err != nil {
						return err
					}
					parentsStarted[parent] = true
				}
				started := fromNanos(at)
				out.Promoted = append(out.Promoted, l)
				out.Started = append(out.Started, contracts.Job{
					ID: l.JobID, Tenant: tenant, Kind: kind, State: contracts.StateRunning, Attempt: l.Attempt,
					Runs: runs + 1, Worker: workerID, CancelRequested: cancel, Parent: parent,
					CreatedAt: fromNanos(created), UpdatedAt: started, StartedAt: &started, HeartbeatAt: &started,
				})
			default:
				out.Lost = append(out.Lost, l)
				continue
			}
			if cancel {
				out.Cancel = append(out.Cancel, l)
			}
		}
		return nil
	})
	if err != nil {
		return store.HeartbeatOutcome{}, err
	}
	return out, nil
}
