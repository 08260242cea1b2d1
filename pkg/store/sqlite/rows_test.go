package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// Requests committed together in one transaction each count their own
// job rows under their own operation; a request that failed after writing
// counts none of its rows (they were rolled back), and the others, run
// again alone, count theirs once. Rows of other tables count as side
// rows.
func TestRowsCountedPerRequestInOneTransaction(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	var ids []string
	for range 4 {
		j, _, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), store.Caps{})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	touch := func(ids ...string) func(*sql.Tx) error {
		return func(tx *sql.Tx) error {
			for _, id := range ids {
				if _, err := tx.Exec(`UPDATE jobs SET updated_at = updated_at + 1 WHERE id = ?`, id); err != nil {
					return err
				}
			}
			return nil
		}
	}
	reqs := []struct {
		op   store.WriteOp
		fn   func(*sql.Tx) error
		fail bool
	}{
		{store.WriteTransition, touch(ids[0], ids[1]), false},
		{store.WriteUpdate, touch(ids[2]), false},
		{store.WriteCancel, func(tx *sql.Tx) error {
			if err := touch(ids[3])(tx); err != nil {
				return err
			}
			return errors.New("boom after writing")
		}, true},
		{store.WriteReconcile, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES ('test:side', 1)`)
			return err
		}, false},
		{store.WriteHeartbeat, touch("no such job"), false},
	}

	before := s.WriteCounts()
	release := queueBehind(t, s)
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		wg.Go(func() { errs[i] = s.write(ctx, r.op, "req", r.fn) })
	}
	require.Eventually(t, func() bool { return len(s.writes.reqs) == len(reqs) }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	for i, r := range reqs {
		if r.fail {
			require.Error(t, errs[i])
		} else {
			require.NoError(t, errs[i])
		}
	}

	d := s.WriteCounts().Sub(before)
	var want store.WriteCounts
	want.Rows[store.WriteTransition] = 2
	want.Rows[store.WriteUpdate] = 1
	require.Equal(t, want.Rows, d.Rows, "job rows by operation")
	require.Equal(t, uint64(3), d.RowsTotal())
	require.Equal(t, uint64(1), d.SideRows, "the counter row")
	for _, op := range []store.WriteOp{store.WriteTransition, store.WriteUpdate, store.WriteReconcile, store.WriteHeartbeat, store.WriteOther} {
		require.Equal(t, uint64(1), d.Writes[op], "requests of %s", op)
	}
	require.Zero(t, d.Writes[store.WriteCancel], "the failed request")
}

// A read request writes no row, and neither does a write request that
// changed nothing.
func TestRowsNotCountedForReads(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	before := s.WriteCounts()
	_, err := s.Get(ctx, "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, s.write(ctx, store.WriteOther, "nothing", func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE jobs SET updated_at = 0 WHERE id = 'missing'`)
		return err
	}))
	d := s.WriteCounts().Sub(before)
	require.Zero(t, d.RowsTotal())
	require.Zero(t, d.SideRows)
}

// BenchmarkRowHook measures what counting rows costs the writer: an
// UPDATE of 256 rows (a claim round's worth) on a connection with the
// pre-update hook and on one without, in memory so that only the CPU
// counts. The difference over 256 is the hook's cost per row.
func BenchmarkRowHook(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		name := "plain"
		if hooked {
			name = "hooked"
		}
		b.Run(name, func(b *testing.B) {
			dsn := "file:rowhook-" + name + "?mode=memory"
			var db *sql.DB
			if hooked {
				db = openWriter(dsn, new(txRows))
			} else {
				var err error
				db, err = sql.Open("sqlite", dsn)
				require.NoError(b, err)
			}
			db.SetMaxOpenConns(1)
			b.Cleanup(func() { _ = db.Close() })
			_, err := db.Exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)`)
			require.NoError(b, err)
			_, err = db.Exec(`INSERT INTO jobs (id, v) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 256) SELECT i, 0 FROM n`)
			require.NoError(b, err)
			b.ResetTimer()
			for b.Loop() {
				res, err := db.Exec(`UPDATE jobs SET v = v + 1`)
				require.NoError(b, err)
				n, _ := res.RowsAffected()
				require.Equal(b, int64(256), n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/row")
		})
	}
}
