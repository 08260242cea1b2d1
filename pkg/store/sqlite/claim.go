package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// maxKeySkips bounds how many ready jobs held back by their concurrency key
// one Claim of one kind steps over before it gives up on that kind.
const maxKeySkips = 1000

// The statements of a claim.
const (
	// readyQuery: the ready jobs of a kind (?1), ready at ?2, best first,
	// after the job at (?3 priority, ?4 fair_at, ?5 id) in ready order
	// (a page after the first; ?6 = 0 reads from the start).
	// The whole job comes with its rowid: the claim then changes the row
	// it read, without looking it up by id again or reading it back.
	//
	// No LIMIT: the reader stops after a page (readyIn). The index gives
	// the order, so rows are found one step at a time, as far as they are
	// read. A bound LIMIT would be worse than none: SQLite's planner reads
	// a LIMIT's bound value, so each new value (a claim's size varies)
	// made the statement prepare itself again on its next step.
	readyQuery = `SELECT jobs.rowid, ` + jobColumns + `
		FROM jobs INDEXED BY jobs_ready_queue` + bodyJoin + `
		WHERE state = 'pending' AND kind = ?1 AND claim_until IS NULL AND held = 0
			AND (?6 = 0 OR priority < ?3 OR (priority = ?3 AND (fair_at > ?4 OR (fair_at = ?4 AND id > ?5))))
			AND (next_dispatch_at IS NULL OR next_dispatch_at <= ?2)
		ORDER BY priority DESC, fair_at, id`
	// keyHoldersQuery counts the jobs holding a tenant's key (?1, ?2) at ?3
	// (see store.KeySlots). A fan-out parent runs nothing itself: it holds
	// none of its key's slots (held = 1 leaves it out).
	keyHoldersQuery = `SELECT count(*) FROM jobs INDEXED BY jobs_concurrency_key
		WHERE tenant = ?1 AND concurrency_key = ?2 AND concurrency_key != '' AND held = 0
			AND (state = 'running' OR (state = 'pending' AND claim_until > ?3))`
	// workerRunningQuery counts the jobs running on a worker (?1).
	workerRunningQuery = `SELECT count(*) FROM jobs INDEXED BY jobs_running_worker WHERE worker = ?1 AND state = 'running'`
	// workerJobsQuery reads the kind and resource request of the jobs
	// running on a worker (?1), which a claim packs by (store.Slots).
	workerJobsQuery = `SELECT kind, cpu, memory FROM jobs INDEXED BY jobs_running_worker WHERE worker = ?1 AND state = 'running'`
	// expireClaimsQuery clears the claims that ended at or before ?1, so
	// their jobs are in the ready queue again.
	expireClaimsQuery = `UPDATE jobs INDEXED BY jobs_claimed SET claim_until = NULL
		WHERE state = 'pending' AND claim_until IS NOT NULL AND claim_until <= ?1`
	// advanceVirtualQuery moves the system's virtual time up to ?1.
	advanceVirtualQuery = `UPDATE counters SET fair_at = max(fair_at, ?1) WHERE scope = ?2`
)

// claimOneQuery and claimQuery start ready jobs read in the same
// transaction on worker ?1 at ?2 (?3: their rowids, see keyed), as
// store.Started says: running, next claim, next run, started and heartbeat
// at ?2.
//
// OR ROLLBACK: a statement that changes many rows and may fail on a
// constraint part-way (state is in the active-key index's condition, the
// columns set are NOT NULL) makes SQLite keep a statement journal to undo
// its own rows, page by page, in memory it allocates and frees per
// statement: 40 % of this UPDATE's CPU in the burn-down's profile. No
// constraint can fail here (pending and running are both active, every
// value is set), and a failed write rolls the whole transaction back
// anyway (write.go), so SQLite may do so itself and keeps no journal.
var claimOneQuery, claimQuery = keyedQueries(`UPDATE OR ROLLBACK jobs SET state = 'running', worker = ?1,
		attempt = attempt + 1, runs = runs + 1, started_at = ?2, heartbeat_at = ?2, updated_at = ?2,
		claim_until = NULL WHERE `,
	`rowid`, `?3`, ` AND state = 'pending' AND (claim_until IS NULL OR claim_until <= ?2)`)

// candidate is a ready job as the claim reads it, with its rowid, and the
// worker slot it is given.
type candidate struct {
	job    contracts.Job
	rowid  int64
	worker string
}

// Claim starts up to len(r.Slots[kind]) of the best ready jobs of each kind
// on the slots given, in one write transaction (see store.ClaimRequest and
// store.Started), and returns them as they are afterwards, best first per
// kind, kinds in name order. The system's virtual time moves up to the
// largest fair_at claimed; a fan-out child that starts starts its parent.
func (s *Store) Claim(ctx context.Context, r store.ClaimRequest) ([]contracts.Job, error) {
	now, kinds, wants := r.Plan()
	if len(kinds) == 0 {
		return nil, nil
	}
	var out []contracts.Job
	err := s.write(ctx, store.WriteClaim, "claim jobs", func(tx *sql.Tx) error {
		out = out[:0]
		s.reserve.arm()
		start := r.StartAt(now)
		slots := store.NewKeySlots(func(tenant, key string) (int, error) {
			return s.keyHoldersIn(ctx, tx, tenant, key, now)
		})
		virtual := 0.0
		if _, err := tx.StmtContext(ctx, s.ws.expireClaims).ExecContext(ctx, now.UnixNano()); err != nil {
			return fmt.Errorf("clear expired claims: %w", err)
		}
		// The write lock holds what the counts read until the claim is in.
		fit, err := r.NewSlots(store.RunningOn{
			Count: func(worker string) (n int, err error) {
				if err := tx.StmtContext(ctx, s.ws.workerRunning).QueryRowContext(ctx, worker).Scan(&n); err != nil {
					return 0, fmt.Errorf("count the jobs running on worker %s: %w", worker, err)
				}
				return n, nil
			},
			Jobs: func(worker string) ([]store.RunningJob, error) { return s.workerJobsIn(ctx, tx, worker) },
		})
		if err != nil {
			return err
		}
		for _, kind := range kinds {
			want := wants[kind]
			got, skipped := 0, 0
			var after *candidate
			// Read a little more than wanted; read on, page by page, only
			// while concurrency keys hold jobs back.
			for got < want && skipped <= maxKeySkips {
				page := want - got + 8
				cands, err := s.readyIn(ctx, tx, kind, now, page, after)
				if err != nil {
					return err
				}
				taken := cands[:0:0]
				for i := range cands {
					c := cands[i]
					after = &cands[i]
					if got == want {
						break
					}
					worker, ok, more := fit.Fit(kind, c.job.Resources)
					if !more {
						want = got // no slot left for this kind
						break
					}
					if !ok {
						skipped++ // waits for room enough (see store.Slots)
						continue
					}
					ok, err := slots.Take(c.job.Tenant, c.job.ConcurrencyKey, c.job.ConcurrencyLimit)
					if err != nil {
						return err
					}
					if !ok {
						skipped++
						continue
					}
					c.worker = worker
					fit.Take(kind, worker, c.job.Resources)
					taken = append(taken, c)
					virtual = max(virtual, c.job.FairAt)
					got++
				}
				// The page's claims go in before the next page is read.
				claimed, err := s.claimIn(ctx, tx, taken, start)
				if err != nil {
					return err
				}
				out = append(out, claimed...)
				if len(cands) < page {
					break // no more ready jobs
				}
			}
		}
		if len(out) == 0 {
			return nil
		}
		if _, err := tx.StmtContext(ctx, s.ws.advanceVirtual).ExecContext(ctx, virtual, store.GlobalScope); err != nil {
			return fmt.Errorf("advance the virtual time: %w", err)
		}
		if g := s.counters[store.GlobalScope]; g != nil && g.loaded {
			g.fair = max(g.fair, virtual) // an admission later in this transaction sees it
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readyIn reads up to limit ready jobs of kind, best first, after the
// candidate after (nil: from the best).
func (s *Store) readyIn(ctx context.Context, tx *sql.Tx, kind string, now time.Time, limit int, after *candidate) ([]candidate, error) {
	var (
		paged   int
		prio    int
		fairAt  float64
		afterID string
	)
	if after != nil {
		paged, prio, fairAt, afterID = 1, after.job.Priority, after.job.FairAt, after.job.ID
	}
	rows, err := tx.StmtContext(ctx, s.ws.ready).QueryContext(ctx, kind, now.UnixNano(), prio, fairAt, afterID, paged)
	if err != nil {
		return nil, fmt.Errorf("read the ready jobs of %q: %w", kind, err)
	}
	defer func() { _ = rows.Close() }()
	var (
		out []candidate
		buf rowBuf
	)
	for len(out) < limit && rows.Next() {
		var c candidate
		if c.job, err = buf.job(rows, &c.rowid); err != nil {
			return nil, fmt.Errorf("read the ready jobs of %q: %w", kind, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the ready jobs of %q: %w", kind, err)
	}
	return out, nil
}

// workerJobsIn reads the jobs running on worker as a claim packs by them.
func (s *Store) workerJobsIn(ctx context.Context, tx *sql.Tx, worker string) ([]store.RunningJob, error) {
	rows, err := tx.StmtContext(ctx, s.ws.workerJobs).QueryContext(ctx, worker)
	if err != nil {
		return nil, fmt.Errorf("read the jobs running on worker %s: %w", worker, err)
	}
	defer func() { _ = rows.Close() }()
	var out []store.RunningJob
	for rows.Next() {
		var (
			j           store.RunningJob
			cpu, memory any
		)
		if err := rows.Scan(&j.Kind, &cpu, &memory); err != nil {
			return nil, fmt.Errorf("read the jobs running on worker %s: %w", worker, err)
		}
		if cpu != nil || memory != nil {
			j.Resources = &contracts.Resources{CPU: colFloat(cpu), Memory: colInt(memory)}
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the jobs running on worker %s: %w", worker, err)
	}
	return out, nil
}

// keyHoldersIn counts the jobs holding a slot of the tenant's key.
func (s *Store) keyHoldersIn(ctx context.Context, tx *sql.Tx, tenant, key string, now time.Time) (int, error) {
	var n int
	if err := tx.StmtContext(ctx, s.ws.keyHolders).QueryRowContext(ctx, tenant, key, now.UnixNano()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the holders of key %q: %w", key, err)
	}
	return n, nil
}

// claimIn starts ready jobs read in this transaction on their slots' workers,
// with one UPDATE per worker, and returns them as started: the write lock
// kept the rows as read. Their parents start with them.
func (s *Store) claimIn(ctx context.Context, tx *sql.Tx, cands []candidate, now time.Time) ([]contracts.Job, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	at := now.UnixNano()
	// Slots come worker by worker, so the groups are few and in order.
	for from := 0; from < len(cands); {
		to := from + 1
		for to < len(cands) && cands[to].worker == cands[from].worker {
			to++
		}
		var taken rowids
		for _, c := range cands[from:to] {
			taken.add(c.rowid)
		}
		if err := taken.exec(ctx, tx, s.ws.claim, cands[from].worker, at); err != nil {
			return nil, fmt.Errorf("start %d jobs on worker %s: %w", to-from, cands[from].worker, err)
		}
		from = to
	}
	started := fromNanos(at)
	out := make([]contracts.Job, len(cands))
	parents := map[string]bool{}
	for i, c := range cands {
		out[i] = store.Started(c.job, c.worker, started)
		s.countMove(c.job.Tenant, contracts.StatePending, contracts.StateRunning, 1)
		if c.job.IsChild() && !parents[c.job.Parent] {
			parents[c.job.Parent] = true
			if err := s.startParent(ctx, tx, c.job.Tenant, c.job.Parent, now); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
