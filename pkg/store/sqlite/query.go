package sqlite

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// List page sizes.
const (
	// DefaultListLimit is the page size of a Query without a Limit.
	DefaultListLimit = 50
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// getQuery reads one job.
const getQuery = `SELECT ` + jobColumns + ` FROM jobs WHERE id = ?`

// Get returns the job with that id, or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (contracts.Job, error) {
	var j contracts.Job
	err := s.readOnWriter(ctx, "get job "+id, func(tx *sql.Tx) error {
		var err error
		j, err = s.jobIn(ctx, tx, id)
		return err
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
// A Limit of 0 means DefaultListLimit; larger than MaxListLimit is cut to it.
// A cursor List did not make is store.ErrBadCursor.
func (s *Store) List(ctx context.Context, q store.Query) ([]contracts.Job, string, error) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = DefaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
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
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, encodeCursor(last.CreatedAt.UnixNano(), last.ID), nil
}

// listQuery selects one page of q and one more row. Each filter set picks
// an index that is already in list order: (created_at, id) alone or after
// tenant, state or both.
func listQuery(q store.Query, limit int) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	if q.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, q.Tenant)
	}
	if q.State != "" {
		where = append(where, "state = ?")
		args = append(args, string(q.State))
	}
	if q.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, q.Kind)
	}
	if q.Cursor != "" {
		created, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		// A row value, so that the index seeks straight to the cursor.
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, created, id)
	}
	query := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	return query, append(args, limit+1), nil
}

// encodeCursor makes the opaque cursor after the row (created, id).
func encodeCursor(created int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created, 10) + ":" + id))
}

// decodeCursor reads a cursor encodeCursor made.
func decodeCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("cursor %q: %w", c, store.ErrBadCursor)
	}
	nanosText, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("cursor %q: %w", c, store.ErrBadCursor)
	}
	created, err := strconv.ParseInt(nanosText, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("cursor %q: %w", c, store.ErrBadCursor)
	}
	return created, id, nil
}

// Stats counts jobs by state (every state present, zeros included) and
// active jobs by tenant (only tenants with some), from one snapshot.
func (s *Store) Stats(ctx context.Context) (store.Counts, error) {
	c := store.Counts{
		ByState:      make(map[contracts.JobState]int, len(contracts.AllStates)),
		TenantActive: map[string]int{},
	}
	for _, st := range contracts.AllStates {
		c.ByState[st] = 0
	}
	err := s.read(ctx, "stats", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
		if err != nil {
			return fmt.Errorf("count states: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { c.ByState[contracts.JobState(k)] = n }); err != nil {
			return fmt.Errorf("count states: %w", err)
		}
		rows, err = tx.QueryContext(ctx, activeByTenantQuery)
		if err != nil {
			return fmt.Errorf("count tenants: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { c.TenantActive[k] = n }); err != nil {
			return fmt.Errorf("count tenants: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Counts{}, err
	}
	return c, nil
}
