package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// getQuery reads one job.
const getQuery = `SELECT ` + jobColumns + ` FROM jobs` + bodyJoin + ` WHERE id = ?`

// getRowQuery and getRowsQuery read jobs' rows by id with their rowids
// first (see rowBuf.job): one, or many (see keyed, idQueries). They are the reads of
// a read-decide-write: the rows alone, without payload and inputs (see
// bodies.go).
var getRowQuery, getRowsQuery = idQueries(`jobs.rowid, ` + hotColumns)

// Get returns the job with that id, or store.ErrNotFound. It reads from
// the read pool, never the write connection: single-job reads (GET
// /v1/jobs/{id}, event streams' polls, the scheduler's checks) run beside
// the writes instead of queueing with them, and WAL mode gives each read
// the latest commit.
func (s *Store) Get(ctx context.Context, id string) (contracts.Job, error) {
	var j contracts.Job
	// Prepared before the transaction: preparing may need a connection.
	stmt, err := s.rc.get(ctx, getQuery)
	if err != nil {
		return contracts.Job{}, fmt.Errorf("sqlite: get job %s: %w", id, err)
	}
	err = s.read(ctx, "get job "+id, func(tx *sql.Tx) error {
		var row *sql.Row
		if stmt != nil {
			row = tx.StmtContext(ctx, stmt).QueryRowContext(ctx, id)
		} else {
			row = tx.QueryRowContext(ctx, getQuery, id)
		}
		var err error
		if j, err = scanJob(row); err != nil {
			return err
		}
		return s.countRunning(ctx, tx, &j)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return contracts.Job{}, fmt.Errorf("sqlite: get job %s: %w", id, store.ErrNotFound)
	case err != nil:
		return contracts.Job{}, err
	}
	return j, nil
}

// List returns one page of the jobs q selects, newest first (created_at,
// then id, descending), and the cursor of the next page, "" on the last one.
// A Limit of 0 means store.DefaultListLimit; larger than store.MaxListLimit
// is cut to it.
// A cursor List did not make is store.ErrBadCursor.
func (s *Store) List(ctx context.Context, q store.Query) ([]contracts.Job, string, error) {
	limit := store.ListLimit(q.Limit)
	query, args, err := listQuery(q, limit)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	for i := range jobs {
		if err := s.countRunning(ctx, s.r, &jobs[i]); err != nil {
			return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
		}
	}
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, store.EncodeCursor(last.CreatedAt, last.ID), nil
}

// listQuery selects one page of q and one more row. Each filter set picks
// an index that is already in list order: (created_at, id) alone or after
// tenant, state or both, of the top-level jobs; (id) after the parent, or
// after the parent and state, of a parent's children (which all have the
// parent's created_at).
func listQuery(q store.Query, limit int) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	// Literal terms, so that the planner sees they imply the partial
	// indexes' conditions.
	if q.Parent == "" {
		where = append(where, "parent = ''")
	} else if q.State == "" {
		// Every child: the primary key's range of the parent's children
		// (the unary + keeps the planner off the index by state).
		where = append(where, "id > ?", "id < ?", "+parent = ?")
		args = append(args, q.Parent+"-", q.Parent+".", q.Parent)
	} else {
		where = append(where, "parent = ?", "parent != ''")
		args = append(args, q.Parent)
	}
	if q.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, q.Tenant)
	}
	from := ` FROM jobs`
	if q.State != "" {
		where = append(where, "state = ?")
		args = append(args, string(q.State))
		switch {
		case q.Parent != "" || q.State == contracts.StateSucceeded:
		case q.State == contracts.StateRunning:
			// The running jobs, a few per worker slot, found on their
			// index and sorted: no index in list order holds them.
			where = append(where, "state = 'running'")
			from = ` FROM jobs INDEXED BY jobs_running_worker`
		default:
			where = append(where, "state NOT IN ('running', 'succeeded')") // jobs_top_listed_by_state
		}
	}
	if q.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, q.Kind)
	}
	if q.Cursor != "" {
		created, id, err := store.DecodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		// A row value, so that the index seeks straight to the cursor.
		if q.Parent != "" {
			where = append(where, "id < ?")
			args = append(args, id)
		} else {
			where = append(where, "(created_at, id) < (?, ?)")
			args = append(args, created.UnixNano(), id)
		}
	}
	query := `SELECT ` + jobColumns + from + bodyJoin + ` WHERE ` + strings.Join(where, " AND ")
	if q.Parent != "" {
		query += ` ORDER BY id DESC LIMIT ?`
	} else {
		query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	}
	return query, append(args, limit+1), nil
}
