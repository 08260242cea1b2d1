package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Many new rows go into the jobs table as bound VALUES rows, in
// statements of a few sizes prepared once (valuesrow.go).
//
// Lists of ids and rowids that one statement reads or changes (a
// heartbeat's leases, a claim's page, a message of results) go as one
// JSON array argument that json_each unpacks (jsonStrings, rowids):
// modernc.org/sqlite matches each bound argument by a scan of all of
// them, so binding costs time quadratic in the number of arguments per
// statement, while one long TEXT costs only its parse. Every read of jobs
// by ids is built by idQueries.
//
// Most new jobs are plain: nothing of a run, a fan-out or a child set yet.
// Their rows bind only the columns a submit fills (dense), the rest are
// constants in the statement, which halves what each row binds.

// sparseColumns are the insert columns a plain new job leaves at their
// zero value.
var sparseColumns = map[string]bool{
	"state": true, "attempt": true, "runs": true, "worker": true, "error": true,
	"result": true, "progress": true, "cancel_requested": true, "started_at": true,
	"finished_at": true, "claim_until": true, "heartbeat_at": true, "errors": true,
	"parent": true, "item_index": true, "window_size": true, "fail_fast": true,
	"children_total": true, "children_succeeded": true, "children_failed": true,
	"children_cancelled": true, "held": true, "children_released": true, "usage": true,
}

// rowShape is the layout of the rows of new jobs, derived from
// insertColumns and a plain new job's arguments.
type rowShape struct {
	// zero are the arguments of a plain new job, in insertColumns order.
	zero []any
	// sparse marks the indexes of sparseColumns in insertColumns.
	sparse []bool
}

// rowLayout is the one layout of this driver's rows of new jobs.
var rowLayout = func() rowShape {
	cols := insertColumnNames()
	l := rowShape{sparse: make([]bool, len(cols)), zero: appendJobArgs(nil, admitInput{})}
	for i, c := range cols {
		l.sparse[i] = sparseColumns[c]
		if c == "state" {
			l.zero[i] = string(contracts.StatePending) // every new job is pending
		}
	}
	return l
}()

// insertColumnNames are insertColumns one by one.
func insertColumnNames() []string {
	cols := strings.Split(insertColumns, ",")
	for i := range cols {
		cols[i] = strings.TrimSpace(cols[i])
	}
	return cols
}

// plain reports whether a new job's arguments hold only zero values in
// the sparse columns.
func (l rowShape) plain(args []any) bool {
	for i, sp := range l.sparse {
		if sp && args[i] != l.zero[i] {
			return false
		}
	}
	return true
}

// valuesQuery is the INSERT of one plain new job: its sparse columns are
// constants, the others bound in insertColumns order (see dense). Binding
// fewer than half the columns costs a quarter of binding them all.
func (l rowShape) valuesQuery() string {
	return `INSERT INTO jobs (` + insertColumns + `) VALUES ` + l.valuesRow()
}

// valuesRow is one plain new job's row of VALUES: its sparse columns
// constants, the others bound in insertColumns order (see dense).
func (l rowShape) valuesRow() string {
	vals := make([]string, len(l.sparse))
	for i, sp := range l.sparse {
		vals[i] = "?"
		if sp {
			vals[i] = sqlLiteral(l.zero[i])
		}
	}
	return `(` + strings.Join(vals, ", ") + `)`
}

// dense appends to dst a plain new job's arguments but its sparse ones:
// what valuesQuery binds. dst may be args[:0]: the kept arguments move
// down in place.
func (l rowShape) dense(dst, args []any) []any {
	for i, sp := range l.sparse {
		if !sp {
			dst = append(dst, args[i])
		}
	}
	return dst
}

// sqlLiteral is a zero argument as SQL.
func sqlLiteral(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	panic(fmt.Sprintf("sqlite: no literal for %T", a))
}

// insertPlainOneQuery inserts one plain new job, bound as it is.
var insertPlainOneQuery = rowLayout.valuesQuery()

// rowGroup is the new rows of one insert: plain ones or the others.
type rowGroup struct {
	plain bool
	ins   []*admitInput
}

// insertJobs inserts new jobs' rows and their bodies: one alone with its
// columns bound (a plain one with only its dense columns), more as rows
// of VALUES (valuesrow.go), plain ones apart from the others.
func (s *Store) insertJobs(ctx context.Context, tx *sql.Tx, rows []admitInput) error {
	args := make([]any, 0, insertColumnCount)
	switch len(rows) {
	case 0:
		return nil
	case 1:
		args = appendJobArgs(args, rows[0])
		st := s.ws.insertJob
		if rowLayout.plain(args) {
			st, args = s.ws.insertPlainOne, rowLayout.dense(args[:0], args)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return s.insertBodies(ctx, tx, rows)
	}
	plain, full := rowGroup{plain: true}, rowGroup{}
	for i := range rows {
		args = appendJobArgs(args[:0], rows[i])
		if rowLayout.plain(args) {
			plain.ins = append(plain.ins, &rows[i])
		} else {
			full.ins = append(full.ins, &rows[i])
		}
	}
	if err := s.insertGroup(ctx, tx, plain, s.ws.plainRows); err != nil {
		return err
	}
	if err := s.insertGroup(ctx, tx, full, s.ws.jobRowsInsert); err != nil {
		return err
	}
	return s.insertBodies(ctx, tx, rows)
}

// insertGroup inserts a group's rows with ins: a plain group's rows
// with their dense columns alone.
func (s *Store) insertGroup(ctx context.Context, tx *sql.Tx, g rowGroup, ins valuesInsert) error {
	if len(g.ins) == 0 {
		return nil
	}
	var (
		row  = make([]any, 0, insertColumnCount)
		args = make([]any, 0, len(g.ins)*ins.width)
	)
	for _, in := range g.ins {
		row = appendJobArgs(row[:0], *in)
		if g.plain {
			args = rowLayout.dense(args, row)
		} else {
			args = append(args, row...)
		}
	}
	if err := ins.exec(ctx, tx, args); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	return nil
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// jsonStrings is ss as a JSON array, the argument of json_each.
func jsonStrings(ss []string) string {
	buf := []byte{'['}
	for i, s := range ss {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, s)
	}
	return string(append(buf, ']'))
}

// keyed is a statement over the rows whose key column matches its key
// argument, in two forms: for one row, the key bound as it is; for many,
// their keys as one JSON array. One row is the common case at low load, and
// there the plain form costs less (no JSON, no list to build).
type keyed struct {
	one, many *sql.Stmt
}

// keyedQueries are the two forms of the query head + key test + tail,
// where the key column key is matched against the argument arg (say "?3").
// The many form keeps key IN (SELECT value FROM json_each(…)): for the
// UPDATEs of rows by their rowids. A read of jobs by id is idQueries'.
func keyedQueries(head, key, arg, tail string) (one, many string) {
	return head + key + ` = ` + arg + tail,
		head + key + ` IN (SELECT value FROM json_each(` + arg + `))` + tail
}

// idQueries are the two forms (see keyed) of every read of the jobs of a
// list of ids, its only argument: SELECT columns (as jobColumns names
// them; the row's rowid as jobs.rowid) of the jobs of those ids. The many
// form walks the ids' JSON array and looks each one up on the id index
// (CROSS JOIN keeps that order); id IN (SELECT value FROM json_each(?))
// would first build a temporary index of the ids ("LIST SUBQUERY"): a
// start heartbeat of 256 leases was read 15-35 % faster so
// (BenchmarkStartHeartbeat). The ids come through a common table
// expression of one column, ids(value), so that the columns of jobs need
// no qualifier (json_each has its own id, key and parent). An id given
// twice finds its job twice; byID keeps one.
func idQueries(columns string) (one, many string) {
	return `SELECT ` + columns + ` FROM jobs WHERE id = ?`,
		`WITH ids(value) AS (SELECT value FROM json_each(?)) SELECT ` + columns + ` FROM ids CROSS JOIN jobs ON jobs.id = ids.value`
}

// pick binds to tx the form of k for n keys and returns it with its key
// argument: one, the only key, or many(), every key as a JSON array.
func (k keyed) pick(ctx context.Context, tx *sql.Tx, n int, one any, many func() string) (*sql.Stmt, any) {
	if n == 1 {
		return tx.StmtContext(ctx, k.one), one
	}
	return tx.StmtContext(ctx, k.many), many()
}

// byID runs k, a query of the rows of ids (its only argument), and returns
// what scan makes of each row, by the id it reads.
func byID[T any](ctx context.Context, tx *sql.Tx, k keyed, ids []string, scan func(*sql.Rows) (string, T, error)) (map[string]T, error) {
	var first any
	if len(ids) > 0 {
		first = ids[0]
	}
	stmt, arg := k.pick(ctx, tx, len(ids), first, func() string { return jsonStrings(ids) })
	rows, err := stmt.QueryContext(ctx, arg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := make(map[string]T, len(ids))
	for rows.Next() {
		id, v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, rows.Err()
}

// rowids collects rows to change with one statement (see keyed).
type rowids struct {
	buf   []byte
	n     int
	first int64
}

// add appends a rowid.
func (r *rowids) add(rowid int64) {
	if r.n == 0 {
		r.buf, r.first = append(r.buf, '['), rowid
	} else {
		r.buf = append(r.buf, ',')
	}
	r.buf = strconv.AppendInt(r.buf, rowid, 10)
	r.n++
}

// exec runs k with args and the rowids last, and checks that it changed
// every row.
func (r *rowids) exec(ctx context.Context, tx *sql.Tx, k keyed, args ...any) error {
	if r.n == 0 {
		return nil
	}
	stmt, keys := k.pick(ctx, tx, r.n, r.first, func() string { return string(append(r.buf, ']')) })
	res, err := stmt.ExecContext(ctx, append(args, keys)...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(r.n) {
		return fmt.Errorf("%d of %d rows changed (%v)", n, r.n, err)
	}
	return nil
}
