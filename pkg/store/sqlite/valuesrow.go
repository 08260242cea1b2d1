package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strings"
)

// Rows of an admission, bound. Admission's many new rows (jobs, their
// bodies) go in as bound VALUES rows, in statements of a power of two
// rows (1, 2, 4 … up to a bound of arguments), each prepared once at
// Open: n rows are the sizes of n's binary digits, largest first, so
// that 37 rows take 32 + 4 + 1 (or, where 32 rows bind too many
// arguments, 16 + 16 + 4 + 1).
//
// They were read out of one JSON array (json_each and ->>), but a
// function call anywhere in a statement (->> is one) may raise an error,
// so SQLite keeps a statement journal for a statement of many rows that
// calls one, OR ROLLBACK or not: each page the insert touched again was
// copied to it first (a third of admission's CPU in BenchmarkLifecycle).
// Bound VALUES call nothing (see changegroup.go, which applies results
// the same way). modernc.org/sqlite matches each bound argument by a
// scan of all of them, so one statement binds at most maxValuesArgs.

// maxValuesArgs bounds the arguments of one statement of rows.
const maxValuesArgs = 256

// valuesInsert is an INSERT of rows of width bound values each (a row's
// other columns are constants of row), in its statements of each size.
type valuesInsert struct {
	head  string
	row   string
	width int
	// stmts[k] inserts 1<<k rows.
	stmts []*sql.Stmt
}

// newValuesInsert is the insert of head (INSERT … VALUES) with rows as
// row spells them ("(?, 'x', ?)"), width "?" each.
func newValuesInsert(head, row string) valuesInsert {
	v := valuesInsert{head: head, row: row, width: strings.Count(row, "?")}
	n := 1
	for n*2*v.width <= maxValuesArgs {
		n *= 2
	}
	v.stmts = make([]*sql.Stmt, bits.Len(uint(n)))
	return v
}

// query is the statement of rows rows.
func (v valuesInsert) query(rows int) string {
	var b strings.Builder
	b.WriteString(v.head)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.row)
	}
	return b.String()
}

// prepare prepares its statements into c.
func (v *valuesInsert) prepare(ctx context.Context, c *stmtCache) error {
	for k := range v.stmts {
		st, err := c.get(ctx, v.query(1<<k))
		if err != nil {
			return err
		}
		v.stmts[k] = st
	}
	return nil
}

// exec inserts the rows of args (width values each, in order) and checks
// that every one went in.
func (v valuesInsert) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	for len(args) > 0 {
		k := min(bits.Len(uint(len(args)/v.width))-1, len(v.stmts)-1)
		rows := 1 << k
		st, err := stmtIn(ctx, tx, v.stmts[k], v.query(rows))
		if err != nil {
			return err
		}
		res, err := st.ExecContext(ctx, args[:rows*v.width]...)
		if err != nil {
			return err
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(rows) {
			return fmt.Errorf("%d of %d rows inserted (%v)", got, rows, err)
		}
		args = args[rows*v.width:]
	}
	return nil
}

// The inserts of many rows of an admission. OR ROLLBACK: a failed insert
// rolls the whole transaction back (write.go), so SQLite may do so
// itself.
//
// plainRowsInsert inserts plain new jobs, their dense columns bound (see
// rowShape.valuesRow).
func plainRowsInsert() valuesInsert {
	return newValuesInsert(`INSERT OR ROLLBACK INTO jobs (`+insertColumns+`) VALUES `, rowLayout.valuesRow())
}

// jobRowsInsert inserts new jobs, every column bound.
func jobRowsInsert() valuesInsert {
	return newValuesInsert(`INSERT OR ROLLBACK INTO jobs (`+insertColumns+`) VALUES `, jobPlaceholders)
}

// bodyRowsInsert inserts new jobs' bodies: id, payload, inputs.
func bodyRowsInsert() valuesInsert {
	return newValuesInsert(`INSERT OR ROLLBACK INTO job_bodies (job_id, payload, inputs) VALUES `, `(?, ?, ?)`)
}
