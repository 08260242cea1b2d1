package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Changes of one shape, one statement. Most of a message of results that
// UpdateEach applies are the same change with other values ("succeeded,
// this result, this usage"): the same columns set, the same
// compare-and-set. Such changes go as one UPDATE … FROM a VALUES list of
// their values (a row per job: its rowid, the state and claim it is
// expected at, then the values of the SET list in order), which finds
// each row by its rowid and sets it only if it is still at the state and
// claim read. One statement of 64 rows costs the writer far less than 64
// statements (each a step through the driver and the VDBE's setup).
//
// The values are bound, not read out of a JSON array as admission once
// read its rows (it binds them too now, valuesrow.go): a function call anywhere in a statement (->> is one) may
// raise an error, so SQLite keeps a statement journal for a statement of
// many rows that calls one, OR ROLLBACK or not, and that journal cost
// more than the statements saved. Bound VALUES call nothing. Rows go in
// statements of a power of two rows (padded with rows of NULLs, which
// match nothing), so that a few prepared statements serve every group.
//
// Only changes whose follow-up writes nothing join a group: a change of
// a fan-out child writes to its parent (and may release or cancel its
// siblings), so it runs alone, in its place, after the groups of the
// changes before it are applied. A job met twice in one call waits for
// its first change likewise. The grouped changes touch only their own
// rows and the counters kept in memory, so applying them together,
// before the next change that runs alone, is applying them in turn.
//
// A row read in the write transaction stays as read until the call
// itself changes it: a grouped change cannot miss its compare-and-set
// unless a change that ran alone since the read moved its row (a child
// that ends its parent). The statement reports only how many rows it set,
// so after such a change the group's rows are read again first, and a
// change whose row moved is a miss, explained (explainMiss) and left out.
// A statement that then sets fewer rows than it was given fails the call.

// minGroupRows is the fewest changes of one shape applied as one
// statement; fewer run one UPDATE each (a prepared statement).
const minGroupRows = 2

// maxGroupRows is the most rows of one group statement.
const maxGroupRows = 64

// groupLead is the values of a group row before its SET values: the
// rowid, the state and the claim expected.
const groupLead = 3

// grouped is a change waiting in its group: the job's index in the call,
// the job read and its rowid, the compare-and-set and the change.
type grouped struct {
	i   int
	row *jobRow
	exp store.Expect
	ch  store.Change
}

// changeGroup is the changes of one shape and their values, groupLead
// and nargs per change.
type changeGroup struct {
	sets    string
	nargs   int
	args    []any
	changes []grouped
}

// changeGroups collects the grouped changes of one UpdateEach, by shape
// in the order first met, and which jobs they change.
type changeGroups struct {
	order []*changeGroup
	by    map[string]*changeGroup
	ids   map[string]bool
	// moved: a change that ran alone since the rows were read may have
	// moved other rows (see above).
	moved bool
}

// holds reports whether a change of the job id waits in a group.
func (g *changeGroups) holds(id string) bool { return g.ids[id] }

// add puts c in its shape's group.
func (g *changeGroups) add(c grouped) error {
	sets, args, err := updateSets(c.ch)
	if err != nil {
		return err
	}
	if g.by == nil {
		g.by, g.ids = map[string]*changeGroup{}, map[string]bool{}
	}
	cg := g.by[sets]
	if cg == nil {
		cg = &changeGroup{sets: sets, nargs: len(args)}
		g.by[sets] = cg
		g.order = append(g.order, cg)
	}
	cg.args = append(cg.args, c.row.rowid, string(c.exp.State), c.exp.Claim)
	cg.args = append(cg.args, args...)
	cg.changes = append(cg.changes, c)
	g.ids[c.exp.ID] = true
	return nil
}

// groupQuery is the UPDATE of rows rows of a group whose changes set
// sets (nargs values each, the "?" of sets in order).
func groupQuery(sets string, nargs, rows int) string {
	var b strings.Builder
	b.WriteString(`UPDATE OR ROLLBACK jobs SET `)
	k := groupLead + 1
	for i, part := range strings.Split(sets, "?") {
		if i > 0 {
			b.WriteString("r.column")
			b.WriteString(strconv.Itoa(k))
			k++
		}
		b.WriteString(part)
	}
	b.WriteString(` FROM (VALUES `)
	row := "(?" + strings.Repeat(", ?", groupLead+nargs-1) + ")"
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	// OR ROLLBACK: no statement journal (see buildUpdate).
	b.WriteString(`) AS r WHERE jobs.rowid = r.column1 AND jobs.state = r.column2 AND jobs.attempt = r.column3`)
	return b.String()
}

// groupRows is the rows of a group statement for n changes: the next
// power of two, at most maxGroupRows.
func groupRows(n int) int {
	rows := minGroupRows
	for rows < n && rows < maxGroupRows {
		rows *= 2
	}
	return rows
}

// flushGroups applies every group's changes, reports each job's outcome
// in out, and forgets them. It returns queries with the statements it
// ran appended, for warm. A miss is its job's error in out; any other
// failure is flushGroups'.
func (s *Store) flushGroups(ctx context.Context, tx *sql.Tx, g *changeGroups, out []store.Updated, queries []string) ([]string, error) {
	for _, cg := range g.order {
		var err error
		if queries, err = s.applyGroup(ctx, tx, cg, g.moved, out, queries); err != nil {
			return queries, err
		}
	}
	*g = changeGroups{moved: g.moved}
	return queries, nil
}

// applyGroup applies one group's changes (see flushGroups); moved: rows
// may have moved since they were read.
func (s *Store) applyGroup(ctx context.Context, tx *sql.Tx, cg *changeGroup, moved bool, out []store.Updated, queries []string) ([]string, error) {
	changes, args := cg.changes, cg.args
	if moved && len(changes) >= minGroupRows {
		var err error
		if changes, args, err = s.unmoved(ctx, tx, cg, out); err != nil {
			return queries, err
		}
	}
	if len(changes) < minGroupRows {
		for _, c := range changes {
			query, err := s.applyChange(ctx, tx, c.row.job, c.row.rowid, c.exp, c.ch)
			if query != "" {
				queries = append(queries, query)
			}
			if err := s.changed(c, err, out); err != nil {
				return queries, err
			}
		}
		return queries, nil
	}
	width := groupLead + cg.nargs
	for len(changes) > 0 {
		rows := groupRows(len(changes))
		n := min(rows, len(changes))
		bound := args[:n*width]
		if n < rows {
			bound = append(bound[:n*width:n*width], make([]any, (rows-n)*width)...)
		}
		query := groupQuery(cg.sets, cg.nargs, rows)
		queries = append(queries, query)
		st, err := stmtIn(ctx, tx, s.wc.lookup(query), query)
		if err != nil {
			return queries, fmt.Errorf("prepare: %w", err)
		}
		res, err := st.ExecContext(ctx, bound...)
		if err != nil {
			return queries, fmt.Errorf("update: %w", err)
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			return queries, fmt.Errorf("update: %d of %d rows set (%v)", got, n, err)
		}
		for _, c := range changes[:n] {
			if err := s.changed(c, s.followUp(ctx, tx, c.row.job, c.exp, c.ch), out); err != nil {
				return queries, err
			}
		}
		changes, args = changes[n:], args[n*width:]
	}
	return queries, nil
}

// unmoved reads a group's rows again and returns its changes whose rows
// are still at the state and claim expected, with their values; each of
// the others is a miss, explained in out.
func (s *Store) unmoved(ctx context.Context, tx *sql.Tx, cg *changeGroup, out []store.Updated) ([]grouped, []any, error) {
	ids := make([]string, len(cg.changes))
	for i, c := range cg.changes {
		ids[i] = c.exp.ID
	}
	now, err := s.jobRowsIn(ctx, tx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read again: %w", err)
	}
	width := groupLead + cg.nargs
	var (
		kept []grouped
		args []any
	)
	for i, c := range cg.changes {
		if r, ok := now[c.exp.ID]; ok && r.job.State == c.exp.State && r.job.Claim == c.exp.Claim {
			kept = append(kept, c)
			args = append(args, cg.args[i*width:(i+1)*width]...)
			continue
		}
		if err := s.changed(c, explainMiss(ctx, tx, c.exp), out); err != nil {
			return nil, nil, err
		}
	}
	return kept, args, nil
}

// changed reports the outcome err of c in out, as UpdateEach does: the
// job afterwards, or an error that wrote nothing as the job's own. Any
// other error is returned: the call fails.
func (s *Store) changed(c grouped, err error, out []store.Updated) error {
	switch {
	case err == nil:
		job := c.ch.Apply(c.row.job)
		out[c.i].Job, c.row.job = job, job
	case wroteNothing(err):
		out[c.i].Err = fmt.Errorf("sqlite: update job %s: %w", c.exp.ID, err)
	default:
		return fmt.Errorf("job %s: %w", c.exp.ID, err)
	}
	return nil
}

// groupable reports whether a change of job may wait in a group: its
// follow-up writes nothing (see above).
func groupable(job contracts.Job) bool { return !job.IsChild() }
