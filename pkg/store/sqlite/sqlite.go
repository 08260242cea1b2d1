// Package sqlite is the embedded store.Store driver: every job lives in one
// SQLite file that several Sluice processes (gateway, scheduler, reaper) may
// open at the same time.
//
// The file runs in WAL mode with synchronous=FULL: every commit is fsynced
// before it returns, so a write the driver reported done survives a
// process crash and a power loss alike. Group commit (write.go) pays one
// fsync for every batch of writes.
//
// Every write is a BEGIN IMMEDIATE transaction: it takes the write lock up front and waits up to the busy timeout for another process
// to let go of it. Inside one process all writes go through a single
// connection (Go serializes them) and reads use a small pool of read-only
// connections.
//
// Admission is exact: the active job counts live in a counters table that
// the same transactions which insert or finish jobs keep up to date.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/tally"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// SchemaVersion is the schema this driver writes, kept in PRAGMA user_version.
const SchemaVersion = 4

const (
	defaultBusyTimeout = 10 * time.Second
	defaultReadConns   = 4
)

// schema is applied in order, idempotently, at every Open.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS jobs (
		id                TEXT    NOT NULL PRIMARY KEY,
		tenant            TEXT    NOT NULL,
		kind              TEXT    NOT NULL,
		key               TEXT    NOT NULL DEFAULT '',
		priority          INTEGER NOT NULL DEFAULT 0,
		state             TEXT    NOT NULL,
		-- attempt holds the claim (Job.Claim) and runs the run number
		-- (Job.Attempt): the columns keep the names they had before the
		-- API renamed the two, as renaming them would need a migration.
		attempt           INTEGER NOT NULL DEFAULT 0,
		runs              INTEGER NOT NULL DEFAULT 0,
		max_attempts      INTEGER NOT NULL DEFAULT 0,
		worker            TEXT    NOT NULL DEFAULT '',
		error             TEXT    NOT NULL DEFAULT '',
		result            TEXT,
		progress          TEXT,
		cancel_requested  INTEGER NOT NULL DEFAULT 0,
		created_at        INTEGER NOT NULL,
		updated_at        INTEGER NOT NULL,
		started_at        INTEGER,
		finished_at       INTEGER,
		next_dispatch_at  INTEGER,
		dispatch_deadline INTEGER,
		claim_until       INTEGER,
		heartbeat_at      INTEGER
	) STRICT`,
	// Admission counters: scope "global" and "tenant:<name>".
	`CREATE TABLE IF NOT EXISTS counters (
		scope  TEXT    NOT NULL PRIMARY KEY,
		active INTEGER NOT NULL
	) STRICT`,
	`INSERT OR IGNORE INTO counters (scope, active) VALUES ('global', 0)`,
	// A job's cold part (see bodies.go): what never changes after its
	// admission and no write after it reads, one row per job that has any.
	bodySchema,
	// A job's cold part goes with its row, whatever deletes it.
	bodyDeleteTrigger,
	// At most one active job per tenant and key.
	`CREATE UNIQUE INDEX IF NOT EXISTS jobs_active_key ON jobs (tenant, key)
		WHERE key != '' AND state IN ('pending', 'running')`,
}

// columns are the columns added since the first schema, each added by
// migrate when its table lacks it.
var columns = []struct{ table, name, decl string }{
	{"jobs", "run_at", "INTEGER"},
	{"jobs", "concurrency_key", "TEXT NOT NULL DEFAULT ''"},
	{"jobs", "concurrency_limit", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "errors", "TEXT"},
	{"jobs", "fair_at", "REAL NOT NULL DEFAULT 0"},
	// The fair-queue clocks: the tenant's last stamp, and on the global
	// row the system's virtual time (the largest fair_at claimed).
	{"counters", "fair_at", "REAL NOT NULL DEFAULT 0"},
	// Fan-out (fanout.go). A child has its parent's id and its index; a
	// parent has its window, its weight in the fair queue and its
	// children's counts (the cursor of the next child to release and
	// those that ended). slots are the admission slots the job holds
	// while active; held jobs are moved by the store, not by dispatch:
	// parents, and children waiting for a place in their window.
	{"jobs", "parent", "TEXT NOT NULL DEFAULT ''"},
	{"jobs", "item_index", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "slots", "INTEGER NOT NULL DEFAULT 1"},
	{"jobs", "held", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "window_size", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "fail_fast", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "weight", "REAL NOT NULL DEFAULT 1"},
	{"jobs", "children_total", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "children_released", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "children_succeeded", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "children_failed", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "children_cancelled", "INTEGER NOT NULL DEFAULT 0"},
	// A run's limits, in nanoseconds (0 = none).
	{"jobs", "stall_timeout", "INTEGER NOT NULL DEFAULT 0"},
	{"jobs", "max_runtime", "INTEGER NOT NULL DEFAULT 0"},
	// (The pinned inputs, a column of jobs until schema 4, live in
	// job_bodies: see splitBodies.)
	// The job's resource request (contracts.Resources: cores, bytes),
	// both NULL when it declared none; plain numbers, so that the claim
	// that packs jobs onto workers by them reads them without decoding.
	{"jobs", "cpu", "REAL"},
	{"jobs", "memory", "INTEGER"},
	// What the last finished run used (contracts.Usage), as JSON.
	{"jobs", "usage", "TEXT"},
}

// indexes need the added columns.
var indexes = []string{
	// Indexes of earlier schemas, replaced below.
	`DROP INDEX IF EXISTS jobs_ready`,
	`DROP INDEX IF EXISTS jobs_unclaimed`,
	`DROP INDEX IF EXISTS jobs_pending_deadline`,
	`DROP INDEX IF EXISTS jobs_created`,
	`DROP INDEX IF EXISTS jobs_tenant_created`,
	`DROP INDEX IF EXISTS jobs_state_created`,
	`DROP INDEX IF EXISTS jobs_tenant_state_created`,
	`DROP INDEX IF EXISTS jobs_active_tenant`,
	`DROP INDEX IF EXISTS jobs_running_beat`,
	`DROP INDEX IF EXISTS jobs_finished`,
	// Gone: the lost-pending scan (pending jobs are never lost: the store is
	// their queue), and the max-runtime scan's own index (it reads the
	// running jobs, as many as the workers' slots, through jobs_running_worker).
	`DROP INDEX IF EXISTS jobs_pending_dispatch`,
	`DROP INDEX IF EXISTS jobs_running_started`,
	// Replaced by indexes that a job's start does not move (see below).
	`DROP INDEX IF EXISTS jobs_top_state_created`,
	`DROP INDEX IF EXISTS jobs_top_tenant_state_created`,
	`DROP INDEX IF EXISTS jobs_active_slots`,

	// List: newest first, optionally per tenant or state. Only top-level
	// jobs (plain jobs and fan-out parents): a parent's children are
	// listed through jobs_children, and stay out of four indexes.
	`CREATE INDEX IF NOT EXISTS jobs_top_created ON jobs (created_at, id) WHERE parent = ''`,
	`CREATE INDEX IF NOT EXISTS jobs_top_tenant_created ON jobs (tenant, created_at, id) WHERE parent = ''`,
	// By state, every state but running and succeeded, the two every job
	// passes through: its claim only takes it out of these (one step
	// instead of moving it, two) and its success leaves them alone (none
	// instead of one). The jobs running, as many as the workers' slots,
	// are listed from jobs_running_worker and sorted; a list of succeeded
	// jobs, most of any history, reads jobs_top_created and skips the few
	// others. (Dropping both indexes made the burn-down 15–20 % faster:
	// they were a sixth of the writer's work per job.)
	`DROP INDEX IF EXISTS jobs_top_state_listed`,
	`DROP INDEX IF EXISTS jobs_top_tenant_state_listed`,
	`CREATE INDEX IF NOT EXISTS jobs_top_listed_by_state ON jobs (state, created_at, id)
		WHERE parent = '' AND state NOT IN ('running', 'succeeded')`,
	`CREATE INDEX IF NOT EXISTS jobs_top_tenant_listed_by_state ON jobs (tenant, state, created_at, id)
		WHERE parent = '' AND state NOT IN ('running', 'succeeded')`,
	// A parent's children by state, in index order (their ids sort so).
	// All of them are a range of the primary key: their ids are the
	// parent's followed by '-' (contracts.ChildID).
	`DROP INDEX IF EXISTS jobs_children_all`,
	`CREATE INDEX IF NOT EXISTS jobs_children ON jobs (parent, state, id) WHERE parent != ''`,
	// Stats and Reconcile: the admission slots active jobs hold, per tenant.
	// Active is unfinished (finished_at is set exactly when a job reaches
	// a final state), so a job's start leaves this index alone. finished_at
	// (always NULL here) is a key column only to make it covering.
	`CREATE INDEX IF NOT EXISTS jobs_unfinished_slots ON jobs (tenant, slots, finished_at)
		WHERE finished_at IS NULL AND slots > 0`,
	// (Stale: the running jobs, as many as the workers' slots, are read
	// through jobs_running_worker and sorted. An index of their last sign
	// of life was moved by every job's start, end and lease renewal.)
	`DROP INDEX IF EXISTS jobs_running_work`,
	// Purge: finished top-level jobs (children go with their parent).
	`CREATE INDEX IF NOT EXISTS jobs_finished_top ON jobs (finished_at)
		WHERE finished_at IS NOT NULL AND parent = ''`,
	// Claim: the ready queue of each kind in ready order. Claimed jobs
	// leave it (a claim is the best jobs: scanning past them on every
	// claim would cost more than moving them out); expired claims are
	// cleared back into it (jobs_claimed). Held jobs are not in it.
	`CREATE INDEX IF NOT EXISTS jobs_ready_queue ON jobs (kind, priority DESC, fair_at, id)
		WHERE state = 'pending' AND claim_until IS NULL AND held = 0`,
	`CREATE INDEX IF NOT EXISTS jobs_claimed ON jobs (claim_until)
		WHERE state = 'pending' AND claim_until IS NOT NULL`,
	// Claim: the jobs running on a worker, which bound what a claim gives
	// it (store.Slots).
	`CREATE INDEX IF NOT EXISTS jobs_running_worker ON jobs (worker) WHERE state = 'running'`,
	// Claim: the jobs holding a concurrency key's slots.
	`CREATE INDEX IF NOT EXISTS jobs_concurrency_key ON jobs (tenant, concurrency_key, state)
		WHERE concurrency_key != ''`,
	// The dispatch deadline sweep (held jobs wait for their window, not
	// for a worker).
	`CREATE INDEX IF NOT EXISTS jobs_deadline_queue ON jobs (dispatch_deadline)
		WHERE state = 'pending' AND held = 0`,
}

// Store is the SQLite implementation of store.Store. It is safe for
// concurrent use by many goroutines, and other processes may open the same
// file at the same time.
type Store struct {
	path string
	w    *sql.DB // one connection: every write transaction
	r    *sql.DB // a few read-only connections
	wc   *stmtCache
	rc   *stmtCache
	ws   writeStmts

	writes *writer
	cp     *checkpointer
	// counters are the counter rows of the open write transaction (see
	// counters.go). Only the write loop touches them.
	counters txCounters
	// parents are the fan-out parents the open write transaction read
	// (see fanout.go). Only the write loop touches them.
	parents txParents
	// chunks sizes the chunks of staged admissions, plainChunks those of
	// large batches of plain jobs (see stage.go).
	chunks, plainChunks *chunker
	// relaxed: the write connection commits with synchronous=NORMAL, for
	// an unacknowledged write (see writeUnacked). Only the write loop
	// touches it.
	relaxed bool
	// abandonAfter: see WithAbandonAfter.
	abandonAfter time.Duration
	// states are the open write transaction's changes to the counts of
	// jobs by state (see statecounts.go). Only the write loop touches them.
	states store.StateCounts
	// stateChecked is when Reconcile last found the counts of jobs by
	// state exact or repaired them (unix nanoseconds; 0: not since Open).
	stateChecked atomic.Int64
	// tally counts the writes committed (WriteCounts).
	tally tally.Tally
	// rows are the rows the open write transaction wrote (see rows.go),
	// counted by the writer connection's pre-update hook.
	rows *txRows
	// reserve keeps free page-sized slots in the engine's allocator for
	// the claim's balances (reserve.go).
	reserve *reserve
}

var _ store.WriteCounter = (*Store)(nil)

// WriteCounts says what the store has committed since it was opened:
// each write request by operation, and the transactions that carried
// them (a transaction carries several requests under load).
func (s *Store) WriteCounts() store.WriteCounts { return s.tally.WriteCounts() }

var _ store.Store = (*Store)(nil)

// Option tunes Open.
type Option func(*config)

type config struct {
	busyTimeout time.Duration
	readConns   int
	fanoutChunk int
	batchChunk  int
	chunkTime   time.Duration
	// abandonAfter: see WithAbandonAfter.
	abandonAfter time.Duration
}

// WithBusyTimeout sets how long a statement waits for another process's
// lock before it fails (default 10s).
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.busyTimeout = d
		}
	}
}

// WithReadConns sets the size of the read connection pool (default 4).
func WithReadConns(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.readConns = n
		}
	}
}

// ownerOnly creates the database file if missing, and makes it and its
// journal files (SQLite gives them the database's mode) readable and
// writable by their owner alone: the store holds every tenant's jobs, and
// a worker's runs (other uids) must not read it.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	_ = f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("owner only: %w", err)
		}
	}
	return nil
}

// Open opens (creating if needed, with its parent directory) the database
// file at path and brings its schema up to date.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg := config{busyTimeout: defaultBusyTimeout, readConns: defaultReadConns, fanoutChunk: defaultFanoutChunk, batchChunk: defaultBatchChunk,
		chunkTime: defaultChunkTime, abandonAfter: defaultAbandonAfter}
	for _, o := range opts {
		o(&cfg)
	}
	if path == "" {
		return nil, errors.New("sqlite: open: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: create directory: %w", abs, err)
	}
	if err := ownerOnly(abs); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}

	rows := new(txRows)
	w := openWriter(dsn(abs, cfg, roleWriter), rows)
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}

	r, err := sql.Open("sqlite", dsn(abs, cfg, roleReader))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	r.SetMaxOpenConns(cfg.readConns)
	r.SetMaxIdleConns(cfg.readConns)
	r.SetConnMaxIdleTime(5 * time.Minute)
	cp, err := startCheckpointer(abs, cfg)
	if err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	s := &Store{path: abs, w: w, r: r, wc: newStmtCache(w), rc: newStmtCache(r), writes: newWriter(), cp: cp,
		chunks: newChunker(cfg.chunkTime, minChunk, cfg.fanoutChunk), plainChunks: newChunker(batchChunkTimes*cfg.chunkTime, minBatchChunk, cfg.batchChunk), abandonAfter: cfg.abandonAfter,
		rows: rows, reserve: newReserve()}
	go s.writeLoop()
	if err := s.prepare(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	// A process that died while it staged a fan-out left its children.
	if _, err := s.dropAbandoned(ctx, time.Now().Add(-s.abandonAfter)); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	return s, nil
}

// connRole is what a connection pool is for.
type connRole int

const (
	// roleReader connections are query-only.
	roleReader connRole = iota
	// roleWriter takes the write lock at BEGIN (_txlock=immediate) and
	// leaves checkpoints to the checkpointer.
	roleWriter
	// roleCheckpointer runs the background checkpoints (checkpoint.go).
	roleCheckpointer
)

// dsn builds a modernc.org/sqlite URI for path and a connection of role.
func dsn(path string, cfg config, role connRole) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "temp_store(MEMORY)")
	// No memory map: its pages count in the process's resident memory
	// (+110 MiB after 100k jobs) and bought no measurable speed.
	q.Add("_pragma", "mmap_size(0)")
	switch role {
	case roleWriter:
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "wal_autocheckpoint(0)")
		q.Set("_txlock", "immediate")
	case roleReader:
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// hasColumn reports whether table has the column name.
func hasColumn(ctx context.Context, tx *sql.Tx, table, name string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up column %s.%s: %w", table, name, err)
	}
	return n > 0, nil
}

// migrate applies the schema in one write transaction and records its version.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if version > SchemaVersion {
		return fmt.Errorf("migrate: database schema version %d is newer than this driver's %d", version, SchemaVersion)
	}
	counted, err := hasStateCounts(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, stmt := range slices.Concat(schema, stateCountSchema, stageSchema) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if !counted {
		// A store of an earlier release: its jobs are counted once, in the
		// transaction that adds the triggers keeping the counts from now on.
		if err := buildStateCounts(ctx, tx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for _, c := range columns {
		has, err := hasColumn(ctx, tx, c.table, c.name)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if has {
			continue
		}
		if _, err := tx.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.name+` `+c.decl); err != nil {
			return fmt.Errorf("migrate: add column %s.%s: %w", c.table, c.name, err)
		}
	}
	if err := splitBodies(ctx, tx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, stmt := range indexes {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if version < SchemaVersion {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion)); err != nil {
			return fmt.Errorf("migrate: write schema version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// prepare prepares the fixed statements and so checks both pools answer.
func (s *Store) prepare(ctx context.Context) error {
	var err error
	if s.ws, err = prepareWrites(ctx, s.wc); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("prepare: read pool: %w", err)
	}
	return nil
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Ping checks that both connection pools answer.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Close closes both connection pools.
func (s *Store) Close() error {
	s.writes.stop()
	unhookWriter(s.w)
	err := errors.Join(s.cp.stop(), s.rc.close(), s.wc.close(), s.r.Close(), s.w.Close())
	s.reserve.release()
	if err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// read runs fn in one read-only transaction: a consistent snapshot.
func (s *Store) read(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}
