package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValuesInsertRows inserts n rows through the statements of each
// size: every row goes in once, with its own values, whatever n.
func TestValuesInsertRows(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	ins := s.ws.bodyRows
	require.Equal(t, 3, ins.width)
	require.Len(t, ins.stmts, 7) // 1 … 64 rows of 3 arguments (≤ maxValuesArgs)
	for _, n := range []int{1, 2, 3, 7, 8, 63, 64, 65, 200} {
		var args []any
		for i := range n {
			args = append(args, fmt.Sprintf("n%d-%03d", n, i), fmt.Sprintf(`{"i":%d}`, i), nil)
		}
		tx, err := s.w.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		require.NoError(t, ins.exec(t.Context(), tx, args), n)
		require.NoError(t, tx.Commit())
		rows, err := s.w.QueryContext(t.Context(), `SELECT job_id, payload FROM job_bodies WHERE job_id LIKE ? ORDER BY job_id`, fmt.Sprintf("n%d-%%", n))
		require.NoError(t, err)
		var got int
		for rows.Next() {
			var id string
			var payload sql.NullString
			require.NoError(t, rows.Scan(&id, &payload))
			require.Equal(t, fmt.Sprintf("n%d-%03d", n, got), id)
			require.Equal(t, fmt.Sprintf(`{"i":%d}`, got), payload.String)
			got++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, n, got)
	}
}

// TestAdmissionInsertsCallNothing checks that no statement of admission's
// rows calls a function: one that does may abort, and SQLite then keeps
// a statement journal for a statement of many rows, OR ROLLBACK or not.
func TestAdmissionInsertsCallNothing(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	for _, ins := range []valuesInsert{s.ws.plainRows, s.ws.jobRowsInsert, s.ws.bodyRows} {
		for k := range ins.stmts {
			query := ins.query(1 << k)
			require.Empty(t, functionCalls(t, s, query), query)
		}
	}
}

// functionCalls lists the function-call opcodes of query's program.
func functionCalls(t *testing.T, s *Store, query string) []string {
	t.Helper()
	rows, err := s.w.QueryContext(t.Context(), `EXPLAIN `+query, make([]any, strings.Count(query, "?"))...)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var calls []string
	for rows.Next() {
		vals := make([]any, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(dest...))
		if op := fmt.Sprint(vals[1]); strings.Contains(op, "Func") {
			calls = append(calls, op+" "+fmt.Sprint(vals[len(vals)-4]))
		}
	}
	require.NoError(t, rows.Err())
	return calls
}
