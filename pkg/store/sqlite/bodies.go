package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Hot and cold apart. A job's row in jobs is what its life changes and
// what the writer reads to change it: state, claim, worker, times,
// counts, and the small options the claim, the retry, the sweeps and the
// indexes read (kind, priority, keys, limits, deadlines). Its cold part,
// in job_bodies, is what never changes after admission and no write
// after it reads: the payload (a fan-out child's item) and the pinned
// inputs, the two columns of unbounded size. A claim, a result, a lease,
// a cancel or a parent's counts rewrite the narrow row only; before,
// every UPDATE rewrote the payload with it, overflow pages and all (16
// KiB payloads: 2.2 ms of the writer per job instead of 0.1).
//
// The cold part is written once, in the transaction that inserts the
// job, and only for a job that has one: a job with neither payload nor
// inputs has no body row. Reads that hand a job out (Get, List, the
// claim's offers, Stale, a key's active job, a parent's running
// children) read it beside the row through bodyJoin; the reads of a
// read-decide-write (Update, UpdateEach) read the row alone
// (hotColumns): their jobs come without payload and inputs. A trigger
// deletes a job's body with its row, whatever deletes it (purge, a
// parent's children, staged children taken back).
//
// Rows written: a body row is a side row (store.JobTable), not a job row,
// so "store rows written per completed job" counts the job rows as
// before and the bodies with the counters.

// bodySchema is the cold part of a job, keyed by its id (job_id, so that
// a join names no column twice). A rowid table, not WITHOUT ROWID: there
// the whole row is the key of every B-tree cell, and each step of a
// search through rows that overflow a page loads the overflow (16 KiB
// payloads were admitted ten times slower than on the job's row).
const bodySchema = `CREATE TABLE IF NOT EXISTS job_bodies (
		job_id  TEXT NOT NULL PRIMARY KEY,
		payload TEXT,
		inputs  TEXT
	) STRICT`

// bodyDeleteTrigger deletes a job's body with its row.
const bodyDeleteTrigger = `CREATE TRIGGER IF NOT EXISTS job_bodies_delete AFTER DELETE ON jobs
	BEGIN DELETE FROM job_bodies WHERE job_id = old.id; END`

// bodyJoin reads a job's cold part beside its row, in a query of
// jobColumns from jobs: jobColumns' payload and inputs are job_bodies'.
const bodyJoin = ` LEFT JOIN job_bodies ON job_id = id`

// hotColumns are jobColumns with the cold ones read as NULL: the job's
// row alone, for the reads of a write that changes it.
var hotColumns = strings.NewReplacer("payload", "NULL", "inputs", "NULL").Replace(jobColumns)

// The statements of the bodies.
const (
	// insertBodyQuery inserts one job's body.
	insertBodyQuery = `INSERT INTO job_bodies (job_id, payload, inputs) VALUES (?1, ?2, ?3)`
	// insertChildBodiesQuery inserts the bodies of a parent's (?1)
	// children from index ?2 on: each one's item of ?3 (itemStrings) as
	// its payload, and the parent's inputs ?4. OR ROLLBACK: a failed
	// insert rolls the transaction back (printf keeps a statement journal
	// all the same, see valuesrow.go).
	insertChildBodiesQuery = `INSERT OR ROLLBACK INTO job_bodies (job_id, payload, inputs)
		SELECT ?1 || '-' || printf('%06d', ?2 + key), value, ?4 FROM json_each(?3)`
)

// hasBody reports whether a new job has a cold part to write.
func (in *admitInput) hasBody() bool {
	return len(in.job.Payload) > 0 || in.inputs != nil
}

// maxRowsBody is the largest body (payload and inputs, in bytes) that
// insertBodies writes in a statement of many rows: SQLite copies each
// value of a multi-row VALUES as it steps through the rows, and with
// modernc.org/sqlite each copy of a large one is a fresh memory mapping.
// Larger bodies are bound one statement each. Admission per job
// (BenchmarkLifecycle, distinct payloads): 16 KiB through a JSON array
// 3.0 ms, one statement each 0.66 ms; 1 KiB 188/133 µs through the
// array, 55/113 µs one statement each; 1 KiB bodies as rows of VALUES
// cost insertBodies 0.78-1.21 s of CPU for 35,360 jobs against
// 0.46-0.55 s one statement each.
const maxRowsBody = 256

// insertBodies writes the cold parts of new jobs (those that have one):
// the small ones as rows of VALUES (valuesrow.go; one alone bound as it
// is), the large ones one statement each.
func (s *Store) insertBodies(ctx context.Context, tx *sql.Tx, rows []admitInput) error {
	var small []any
	for i := range rows {
		in := &rows[i]
		switch {
		case !in.hasBody():
		case in.bodySize() > maxRowsBody:
			if err := s.insertBody(ctx, tx, in.job.ID, jsonArg(in.job.Payload), in.inputs); err != nil {
				return err
			}
		default:
			small = append(small, in.job.ID, jsonArg(in.job.Payload), in.inputs)
		}
	}
	switch len(small) {
	case 0:
		return nil
	case 3:
		return s.insertBody(ctx, tx, small...)
	}
	if err := s.ws.bodyRows.exec(ctx, tx, small); err != nil {
		return fmt.Errorf("insert %d bodies: %w", len(small)/3, err)
	}
	return nil
}

// insertBody writes one new job's body: its id, payload and inputs.
func (s *Store) insertBody(ctx context.Context, tx *sql.Tx, body ...any) error {
	if _, err := tx.StmtContext(ctx, s.ws.insertBody).ExecContext(ctx, body...); err != nil {
		return fmt.Errorf("insert the body of %s: %w", body[0], err)
	}
	return nil
}

// bodySize is the size of a new job's body in bytes.
func (in *admitInput) bodySize() int {
	n := len(in.job.Payload)
	if s, ok := in.inputs.(string); ok {
		n += len(s)
	}
	return n
}

// insertChildBodies writes the bodies of a parent's children from index
// from on, items being their items as itemStrings makes them.
func insertChildBodies(ctx context.Context, tx *sql.Tx, parent string, from int, items []byte, inputs any) error {
	if _, err := tx.ExecContext(ctx, insertChildBodiesQuery, parent, from, string(items), inputs); err != nil {
		return fmt.Errorf("insert the bodies of the children of %s: %w", parent, err)
	}
	return nil
}

// splitBodies moves the cold columns of a store of schema 3 or earlier
// (payload and inputs, then columns of jobs) to job_bodies and drops
// them from jobs, inside migrate's transaction: a store opened twice, or
// of schema 4, has nothing to move.
func splitBodies(ctx context.Context, tx *sql.Tx) error {
	var cold []string
	for _, c := range []string{"payload", "inputs"} {
		has, err := hasColumn(ctx, tx, "jobs", c)
		if err != nil {
			return err
		}
		if has {
			cold = append(cold, c)
		}
	}
	if len(cold) == 0 {
		return nil
	}
	sel := map[string]string{"payload": "NULL", "inputs": "NULL"}
	for _, c := range cold {
		sel[c] = c
	}
	_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO job_bodies (job_id, payload, inputs)
		SELECT id, `+sel["payload"]+`, `+sel["inputs"]+` FROM jobs
		WHERE `+sel["payload"]+` IS NOT NULL OR `+sel["inputs"]+` IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("move payloads and inputs to job_bodies: %w", err)
	}
	for _, c := range cold {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE jobs DROP COLUMN `+c); err != nil {
			return fmt.Errorf("drop column jobs.%s: %w", c, err)
		}
	}
	return nil
}
