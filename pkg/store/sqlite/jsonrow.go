package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Many new rows go into the jobs table as one JSON array argument that a
// single INSERT … SELECT unpacks: modernc.org/sqlite matches each bound
// argument by a scan of all of them, so binding costs time quadratic in
// the number of arguments per statement, while one long TEXT costs only
// its parse. Each row is an array of column values (appendJSONRow), made
// into JSONB once so that every column is read without parsing again.
//
// Lists of ids and rowids that one statement reads or changes (a
// heartbeat's leases, a claim's page, a message of results) go the same
// way: one JSON array that json_each unpacks (jsonStrings, rowids); every
// read of jobs by ids is built by idQueries.
//
// Most new jobs are plain: nothing of a run, a fan-out or a child set yet.
// Their rows carry only the columns a submit fills (plainColumns), the
// rest are constants in the statement, which halves what SQLite unpacks.
// And the jobs of one batch share most of what they do carry (tenant,
// kind, times, limits): in a large batch the columns that hold one value
// in every row are bound once, so each row carries only what sets it
// apart (its id, its fair-queue stamp, often its payload).

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

// jsonRows is the layout of the JSON row statements, derived from
// insertColumns and a plain new job's arguments.
type jsonRows struct {
	// zero are the arguments of a plain new job, in insertColumns order.
	zero []any
	// sparse marks the indexes of sparseColumns in insertColumns.
	sparse []bool
}

// rowLayout is the one layout of this driver's JSON rows.
var rowLayout = func() jsonRows {
	cols := insertColumnNames()
	l := jsonRows{sparse: make([]bool, len(cols)), zero: appendJobArgs(nil, admitInput{})}
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
func (l jsonRows) plain(args []any) bool {
	for i, sp := range l.sparse {
		if sp && args[i] != l.zero[i] {
			return false
		}
	}
	return true
}

// query is the INSERT … SELECT of JSON rows: every column read from the
// row, or with plain, the sparse ones as constants, and those same marks
// bound once, as arguments after the rows (see sameColumns). OR ROLLBACK:
// a failed insert rolls the whole transaction back (write.go), so SQLite
// may do so itself and keeps no statement journal for a statement of
// many rows (see claimQuery; a third of a batch admission's CPU).
func (l jsonRows) query(plain bool, same []bool) string {
	sel := make([]string, 0, len(l.sparse))
	k := 0
	for i, sp := range l.sparse {
		switch {
		case plain && sp:
			sel = append(sel, sqlLiteral(l.zero[i]))
		case same != nil && same[i]:
			sel = append(sel, "?")
		default:
			sel = append(sel, "v->>"+strconv.Itoa(k))
			k++
		}
	}
	return `WITH r(v) AS MATERIALIZED (SELECT jsonb(value) FROM json_each(?))
		INSERT OR ROLLBACK INTO jobs (` + insertColumns + `) SELECT ` + strings.Join(sel, ", ") + ` FROM r`
}

// valuesQuery is the INSERT of one plain new job: its sparse columns are
// constants, the others bound in insertColumns order (see dense). Binding
// fewer than half the columns costs a quarter of binding them all.
func (l jsonRows) valuesQuery() string {
	vals := make([]string, len(l.sparse))
	for i, sp := range l.sparse {
		vals[i] = "?"
		if sp {
			vals[i] = sqlLiteral(l.zero[i])
		}
	}
	return `INSERT INTO jobs (` + insertColumns + `) VALUES (` + strings.Join(vals, ", ") + `)`
}

// dense appends to dst a plain new job's arguments but its sparse ones:
// what valuesQuery binds. dst may be args[:0]: the kept arguments move
// down in place.
func (l jsonRows) dense(dst, args []any) []any {
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

// The statements of JSON rows with nothing bound once, and of one plain
// row bound as it is.
var (
	insertJobsQuery     = rowLayout.query(false, nil)
	insertPlainQuery    = rowLayout.query(true, nil)
	insertPlainOneQuery = rowLayout.valuesQuery()
)

// minSameRows is the fewest rows of one statement for which the columns
// holding one value in every row are bound once (sameColumns): that
// statement is prepared for its transaction alone, which below this many
// rows costs more than the JSON it saves.
const minSameRows = 16

// rowGroup is the new rows of one statement: plain ones or the others.
type rowGroup struct {
	plain bool
	ins   []*admitInput
	// first are the first row's arguments; same marks the columns whose
	// value every row so far shares with it.
	first []any
	same  []bool
}

// add puts in, whose arguments are args, in the group.
func (g *rowGroup) add(in *admitInput, args []any) {
	g.ins = append(g.ins, in)
	if g.first == nil {
		g.first = append([]any(nil), args...)
		g.same = make([]bool, len(args))
		for i := range g.same {
			g.same[i] = bindable(args[i])
		}
		return
	}
	for i, same := range g.same {
		if same && args[i] != g.first[i] {
			g.same[i] = false
		}
	}
}

// bindable reports whether a can be compared and bound once for a whole
// group: the argument types the JSON rows carry, but a NaN.
func bindable(a any) bool {
	switch v := a.(type) {
	case nil, string, int, int64:
		return true
	case float64:
		return v == v
	}
	return false
}

// insertJobs inserts new jobs' rows and their bodies: one alone with its columns bound (a
// plain one with only its dense columns), more as JSON rows, plain ones
// apart from the others.
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
			plain.add(&rows[i], args)
		} else {
			full.add(&rows[i], args)
		}
	}
	if err := s.insertGroup(ctx, tx, plain, s.ws.insertPlain); err != nil {
		return err
	}
	if err := s.insertGroup(ctx, tx, full, s.ws.insertJobs); err != nil {
		return err
	}
	return s.insertBodies(ctx, tx, rows)
}

// insertGroup inserts a group's rows with one statement: fixed, the
// prepared one, or for a large group whose rows share columns, one of its
// own that binds those once.
func (s *Store) insertGroup(ctx context.Context, tx *sql.Tx, g rowGroup, fixed *sql.Stmt) error {
	if len(g.ins) == 0 {
		return nil
	}
	same := g.same
	if len(g.ins) < minSameRows || !slices.Contains(g.same, true) {
		same = nil
	}
	var (
		buf  []byte
		args = make([]any, 0, insertColumnCount)
		err  error
	)
	for _, in := range g.ins {
		args = appendJobArgs(args[:0], *in)
		if buf, err = rowLayout.appendRow(buf, args, g.plain, same); err != nil {
			return fmt.Errorf("insert %s: %w", in.job.ID, err)
		}
	}
	bound := []any{string(append(buf, ']'))}
	stmt := tx.StmtContext(ctx, fixed)
	if same != nil {
		for i, sm := range same {
			if sm && !(g.plain && rowLayout.sparse[i]) {
				bound = append(bound, g.first[i])
			}
		}
		if stmt, err = tx.PrepareContext(ctx, rowLayout.query(g.plain, same)); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		defer func() { _ = stmt.Close() }()
	}
	res, err := stmt.ExecContext(ctx, bound...)
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if got, err := res.RowsAffected(); err != nil || int(got) != len(g.ins) {
		return fmt.Errorf("insert: %d of %d rows inserted (%v)", got, len(g.ins), err)
	}
	return nil
}

// appendRow appends one row to a JSON array being built (opening it on
// the first row): all of args but, with plain, those of sparse columns,
// and those same marks (bound once for all rows).
func (l jsonRows) appendRow(buf []byte, args []any, plain bool, same []bool) ([]byte, error) {
	if len(buf) == 0 {
		buf = append(buf, '[')
	} else {
		buf = append(buf, ',')
	}
	buf = append(buf, '[')
	first := true
	for i, a := range args {
		if (plain && l.sparse[i]) || (same != nil && same[i]) {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		var err error
		if buf, err = appendJSONValue(buf, a); err != nil {
			return buf, fmt.Errorf("column %d: %w", i, err)
		}
	}
	return append(buf, ']'), nil
}

// appendJSONValue appends a as the JSON value that ->> reads back as the
// value the argument would bind: NULL, INTEGER, REAL or TEXT. (A whole
// REAL reads back as INTEGER, which a REAL column stores as the same
// value.)
func appendJSONValue(buf []byte, a any) ([]byte, error) {
	switch v := a.(type) {
	case nil:
		return append(buf, "null"...), nil
	case string:
		return appendJSONString(buf, v), nil
	case int:
		return strconv.AppendInt(buf, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(buf, v, 10), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return buf, fmt.Errorf("%v has no JSON form", v)
		}
		return strconv.AppendFloat(buf, v, 'g', -1, 64), nil
	}
	return buf, fmt.Errorf("unsupported type %T", a)
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
