package sqlite

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// schema3Jobs is the jobs table of schema 3, every column in one
// statement: the payload and the inputs on the job's row.
const schema3Jobs = `CREATE TABLE jobs (
	id TEXT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL, kind TEXT NOT NULL, payload TEXT,
	key TEXT NOT NULL DEFAULT '', priority INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL,
	attempt INTEGER NOT NULL DEFAULT 0, runs INTEGER NOT NULL DEFAULT 0,
	max_attempts INTEGER NOT NULL DEFAULT 0, worker TEXT NOT NULL DEFAULT '',
	error TEXT NOT NULL DEFAULT '', result TEXT, progress TEXT,
	cancel_requested INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL, started_at INTEGER, finished_at INTEGER,
	next_dispatch_at INTEGER, dispatch_deadline INTEGER, claim_until INTEGER,
	heartbeat_at INTEGER, run_at INTEGER, concurrency_key TEXT NOT NULL DEFAULT '',
	concurrency_limit INTEGER NOT NULL DEFAULT 0, errors TEXT, fair_at REAL NOT NULL DEFAULT 0,
	parent TEXT NOT NULL DEFAULT '', item_index INTEGER NOT NULL DEFAULT 0,
	slots INTEGER NOT NULL DEFAULT 1, held INTEGER NOT NULL DEFAULT 0,
	window_size INTEGER NOT NULL DEFAULT 0, fail_fast INTEGER NOT NULL DEFAULT 0,
	weight REAL NOT NULL DEFAULT 1, children_total INTEGER NOT NULL DEFAULT 0,
	children_released INTEGER NOT NULL DEFAULT 0, children_succeeded INTEGER NOT NULL DEFAULT 0,
	children_failed INTEGER NOT NULL DEFAULT 0, children_cancelled INTEGER NOT NULL DEFAULT 0,
	stall_timeout INTEGER NOT NULL DEFAULT 0, max_runtime INTEGER NOT NULL DEFAULT 0, inputs TEXT
) STRICT`

// TestOpenMovesColdColumns: a store file of schema 3, payloads and inputs
// on the jobs' rows, is migrated at Open: every job reads back as it was
// (a plain job with both, one with neither, a parent and its children),
// the columns leave jobs for job_bodies, and a second Open finds nothing
// left to move.
func TestOpenMovesColdColumns(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sluice.db")
	created := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	inputs := []contracts.InputRef{{Name: "model", URI: "file:///m", SHA256: strings.Repeat("ef", 32)}}
	inputsJSON, err := json.Marshal(inputs)
	require.NoError(t, err)

	old, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	insert := `INSERT INTO jobs (id, tenant, kind, payload, state, max_attempts, created_at, updated_at,
		dispatch_deadline, parent, item_index, slots, held, window_size, children_total, children_released, inputs, fair_at)
		VALUES (?, 'acme', 'test.kind', ?, 'pending', 3, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	at, deadline := created.UnixNano(), created.Add(time.Hour).UnixNano()
	for _, stmt := range []struct {
		q    string
		args []any
	}{
		{schema3Jobs, nil},
		{`CREATE TABLE counters (scope TEXT NOT NULL PRIMARY KEY, active INTEGER NOT NULL, fair_at REAL NOT NULL DEFAULT 0) STRICT`, nil},
		{`INSERT INTO counters (scope, active) VALUES ('global', 3), ('tenant:acme', 3), ('items:acme', 4)`, nil},
		{insert, []any{"plain", `{"big":"` + strings.Repeat("p", 9000) + `"}`, at, at, deadline, "", 0, 1, 0, 0, 0, 0, string(inputsJSON), 1.0}},
		{insert, []any{"bare", nil, at, at, deadline, "", 0, 1, 0, 0, 0, 0, nil, 2.0}},
		{insert, []any{"par", nil, at, at, deadline, "", 0, 1, 1, 1, 2, 1, string(inputsJSON), 0.0}},
		{insert, []any{contracts.ChildID("par", 0), `{"i":0}`, at, at, deadline, "par", 0, 0, 0, 0, 0, 0, string(inputsJSON), 3.0}},
		{insert, []any{contracts.ChildID("par", 1), `{"i":1}`, at, at, deadline, "par", 1, 0, 1, 0, 0, 0, string(inputsJSON), 0.0}},
		{`PRAGMA user_version = 3`, nil},
	} {
		_, err := old.ExecContext(ctx, stmt.q, stmt.args...)
		require.NoError(t, err, stmt.q)
	}
	require.NoError(t, old.Close())

	check := func(s *Store) {
		t.Helper()
		plain, err := s.Get(ctx, "plain")
		require.NoError(t, err)
		require.Equal(t, `{"big":"`+strings.Repeat("p", 9000)+`"}`, string(plain.Payload))
		require.Equal(t, inputs, plain.Inputs)
		require.Equal(t, contracts.StatePending, plain.State)
		require.Equal(t, 3, plain.MaxAttempts)
		bare, err := s.Get(ctx, "bare")
		require.NoError(t, err)
		require.Nil(t, bare.Payload)
		require.Nil(t, bare.Inputs)
		par, err := s.Get(ctx, "par")
		require.NoError(t, err)
		require.Equal(t, inputs, par.Inputs)
		require.Equal(t, 2, par.Children.Total)
		for i := range 2 {
			c, err := s.Get(ctx, contracts.ChildID("par", i))
			require.NoError(t, err)
			require.Equal(t, `{"i":`+string(rune('0'+i))+`}`, string(c.Payload))
			require.Equal(t, inputs, c.Inputs)
		}
		var cols int
		require.NoError(t, s.r.QueryRowContext(ctx,
			`SELECT count(*) FROM pragma_table_info('jobs') WHERE name IN ('payload', 'inputs')`).Scan(&cols))
		require.Zero(t, cols, "the cold columns left jobs")
		var version int
		require.NoError(t, s.r.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version))
		require.Equal(t, SchemaVersion, version)
	}
	s, err := Open(ctx, path)
	require.NoError(t, err)
	check(s)
	require.NoError(t, s.Close())

	// Again: nothing to move, nothing lost; the jobs run as any other.
	s = openTest(t, path)
	check(s)
	claimed, err := s.Claim(ctx, store.ClaimRequest{Now: created.Add(time.Second),
		Slots: map[string][]string{"test.kind": storetest.Slots("w1", 10)}})
	require.NoError(t, err)
	require.Len(t, claimed, 3, "plain, bare and the released child")
	for _, j := range claimed {
		if j.ID == "plain" {
			require.Equal(t, inputs, j.Inputs)
			require.Len(t, j.Payload, 9000+len(`{"big":""}`))
		}
	}
}

// TestWritesAfterAdmissionLeaveBodiesAlone: a job's payload and inputs
// are written once, in a row of job_bodies beside its row: its claim and
// its result write no body row, a job with neither has none, and purging
// the job deletes it.
func TestWritesAfterAdmissionLeaveBodiesAlone(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	now := time.Now()
	j := storetest.NewJob("acme", now)
	j.Inputs = []contracts.InputRef{{Name: "x", URI: "file:///x", SHA256: strings.Repeat("01", 32)}}
	bare := storetest.NewJob("acme", now)
	bare.Payload = nil
	for _, job := range []contracts.Job{j, bare} {
		_, adm, err := s.Admit(ctx, job, store.Caps{})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
	}
	bodies := func() int {
		var n int
		require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM job_bodies`).Scan(&n))
		return n
	}
	require.Equal(t, 1, bodies(), "one body: the bare job has none")

	before := s.WriteCounts()
	claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", 2)}})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	ids := []string{claimed[0].ID, claimed[1].ID}
	out, err := s.UpdateEach(ctx, ids, func(int, contracts.Job) (store.Change, error) {
		return store.Change{Now: now, State: contracts.StateSucceeded}, nil
	})
	require.NoError(t, err)
	for _, u := range out {
		require.NoError(t, u.Err)
	}
	after := s.WriteCounts()
	require.Equal(t, 1, bodies())
	require.Equal(t, uint64(2), after.Rows[store.WriteClaim]-before.Rows[store.WriteClaim], "a claim writes each job's row once")
	require.Equal(t, uint64(2), after.Rows[store.WriteUpdate]-before.Rows[store.WriteUpdate], "a result writes each job's row once")

	n, err := s.Purge(ctx, now.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, bodies(), "purge took the body with its job")
}
