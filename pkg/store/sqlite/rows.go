package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	msqlite "modernc.org/sqlite"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/internal/tally"
)

// Rows written. SQLite tells a registered pre-update hook of every row an
// INSERT, UPDATE or DELETE of the connection is about to write, with its
// table, whatever statement wrote it (one job's UPDATE, a claim round's,
// a counter's upsert at the commit). The writer connection counts them
// there, in the open transaction's txRows, by the operation of the
// request running at that moment; the write loop adds them to the tally
// when the transaction commits and forgets them when it rolls back. One
// hook counts every statement, so no write path can forget to.
//
// What it costs (BenchmarkRowHook, an UPDATE of 256 two-column rows, CPU
// profile): the hook is about 90 ns of CPU per row (a lookup of the
// connection's hook, the table's name copied, a call), 19 % of that
// trivial UPDATE; a job's row (40 columns, its indexes) costs the writer
// far more: in a burn-down of 100k jobs (400k job rows) the hook took
// 90 ms of 45 s of CPU samples, 0.4 % of the write loop's. Reading each
// statement's RowsAffected would cost nothing more, but needs a line at
// every statement that writes (two dozen, RETURNING ones counted by
// hand) and misses the ones added later; total_changes() around each
// request costs a statement per request and cannot tell a job's row from
// a counter's.

// txRows are the rows the open write transaction has written so far.
// Only the goroutine that holds the writer connection touches them: the
// write loop, or Open before it starts.
type txRows struct {
	// op is what the statements running now count as.
	op store.WriteOp
	// n counts the job rows by operation (Rows) and the side rows.
	n store.WriteCounts
}

// wrote counts one row of table, under the operation running now.
func (t *txRows) wrote(table string) {
	if tally.JobTable(table) {
		t.n.Rows[t.op]++
		return
	}
	t.n.SideRows++
}

// reset forgets what the transaction wrote (a new transaction, or one
// rolled back).
func (t *txRows) reset() { t.n = store.WriteCounts{} }

// writerConnector opens the writer's connections with rows' pre-update
// hook registered, so that every row they write is counted.
type writerConnector struct {
	drv  msqlite.Driver
	dsn  string
	rows *txRows
}

var _ driver.Connector = (*writerConnector)(nil)

// Connect implements driver.Connector.
func (c *writerConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	hr, ok := conn.(msqlite.HookRegisterer)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("connection %T takes no pre-update hook", conn)
	}
	rows := c.rows
	hr.RegisterPreUpdateHook(func(d msqlite.SQLitePreUpdateData) { rows.wrote(d.TableName) })
	return conn, nil
}

// Driver implements driver.Connector.
func (c *writerConnector) Driver() driver.Driver { return &c.drv }

// openWriter opens the writer's pool of one connection on dsn, counting
// the rows it writes in rows.
func openWriter(dsn string, rows *txRows) *sql.DB {
	return sql.OpenDB(&writerConnector{dsn: dsn, rows: rows})
}

// unhookWriter takes the hook off the writer's connection before it
// closes (the driver keeps hooks in a table of its own until then). A
// pool already closed has nothing to take off.
func unhookWriter(db *sql.DB) {
	conn, err := db.Conn(context.Background())
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	_ = conn.Raw(func(dc any) error {
		if hr, ok := dc.(msqlite.HookRegisterer); ok {
			hr.RegisterPreUpdateHook(nil)
		}
		return nil
	})
}
