package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
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
// Most new jobs are plain: nothing of a run, a fan-out or a child set yet.
// Their rows carry only the columns a submit fills (plainColumns), the
// rest are constants in the statement, which halves what SQLite unpacks.

// sparseColumns are the insert columns a plain new job leaves at their
// zero value.
var sparseColumns = map[string]bool{
	"state": true, "attempt": true, "runs": true, "worker": true, "error": true,
	"result": true, "progress": true, "cancel_requested": true, "started_at": true,
	"finished_at": true, "claim_until": true, "heartbeat_at": true, "errors": true,
	"parent": true, "item_index": true, "window_size": true, "fail_fast": true,
	"children_total": true, "children_succeeded": true, "children_failed": true,
	"children_cancelled": true, "held": true, "children_released": true,
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
// row, or with plain, the sparse ones as constants.
func (l jsonRows) query(plain bool) string {
	sel := make([]string, 0, len(l.sparse))
	k := 0
	for i, sp := range l.sparse {
		if plain && sp {
			sel = append(sel, sqlLiteral(l.zero[i]))
			continue
		}
		sel = append(sel, "v->>"+strconv.Itoa(k))
		k++
	}
	return `WITH r(v) AS MATERIALIZED (SELECT jsonb(value) FROM json_each(?))
		INSERT INTO jobs (` + insertColumns + `) SELECT ` + strings.Join(sel, ", ") + ` FROM r`
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

// The statements of JSON rows.
var (
	insertJobsQuery  = rowLayout.query(false)
	insertPlainQuery = rowLayout.query(true)
)

// insertJobs inserts new jobs' rows: one alone with its columns bound,
// more as JSON rows, plain ones apart from the others.
func (s *Store) insertJobs(ctx context.Context, tx *sql.Tx, rows []admitInput) error {
	args := make([]any, 0, insertColumnCount)
	switch len(rows) {
	case 0:
		return nil
	case 1:
		if _, err := tx.StmtContext(ctx, s.ws.insertJob).ExecContext(ctx, appendJobArgs(args, rows[0])...); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	}
	var plain, full []byte
	nPlain, nFull := 0, 0
	for _, in := range rows {
		args = appendJobArgs(args[:0], in)
		var err error
		if rowLayout.plain(args) {
			plain, err = rowLayout.appendRow(plain, args, true)
			nPlain++
		} else {
			full, err = rowLayout.appendRow(full, args, false)
			nFull++
		}
		if err != nil {
			return fmt.Errorf("insert %s: %w", in.job.ID, err)
		}
	}
	if err := execRows(ctx, tx.StmtContext(ctx, s.ws.insertPlain), plain, nPlain); err != nil {
		return err
	}
	return execRows(ctx, tx.StmtContext(ctx, s.ws.insertJobs), full, nFull)
}

// execRows runs a JSON row statement over rows (a JSON array without its
// closing bracket) and checks that all n went in.
func execRows(ctx context.Context, stmt *sql.Stmt, rows []byte, n int) error {
	if n == 0 {
		return nil
	}
	res, err := stmt.ExecContext(ctx, string(append(rows, ']')))
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if got, err := res.RowsAffected(); err != nil || int(got) != n {
		return fmt.Errorf("insert: %d of %d rows inserted (%v)", got, n, err)
	}
	return nil
}

// appendRow appends one row to a JSON array being built (opening it on
// the first row): all of args, or with plain, those of non-sparse columns.
func (l jsonRows) appendRow(buf []byte, args []any, plain bool) ([]byte, error) {
	if len(buf) == 0 {
		buf = append(buf, '[')
	} else {
		buf = append(buf, ',')
	}
	buf = append(buf, '[')
	first := true
	for i, a := range args {
		if plain && l.sparse[i] {
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
