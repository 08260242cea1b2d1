package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Counting one tenant's jobs reads only indexes, as Stats does: its
// top-level jobs in state order (succeeded aside), all its top-level jobs
// (succeeded are the rest), and the children of its fan-out parents, a
// range of jobs_children per parent.
var (
	tenantTopByStateQuery = `SELECT state, count(*) FROM jobs INDEXED BY jobs_top_tenant_state_listed
		WHERE tenant = ? AND parent = '' AND state != 'succeeded' GROUP BY state`
	tenantTopQuery = `SELECT count(*) FROM jobs INDEXED BY jobs_top_tenant_created
		WHERE tenant = ? AND parent = ''`
	tenantChildrenByState = func() string {
		sums := make([]string, len(contracts.AllStates))
		for i, st := range contracts.AllStates {
			sums[i] = fmt.Sprintf("coalesce(sum(c.state = '%s'), 0)", st)
		}
		return `SELECT ` + strings.Join(sums, ", ") + ` FROM jobs AS p INDEXED BY jobs_top_tenant_created
			JOIN jobs AS c INDEXED BY jobs_children ON c.parent = p.id AND c.parent != ''
			WHERE p.tenant = ? AND p.parent = '' AND p.children_total > 0`
	}()
)

// TenantCounts counts tenant's jobs by state (every state present, zeros
// included), children of its fan-outs included, from one snapshot.
func (s *Store) TenantCounts(ctx context.Context, tenant string) (map[contracts.JobState]int, error) {
	out := make(map[contracts.JobState]int, len(contracts.AllStates))
	for _, st := range contracts.AllStates {
		out[st] = 0
	}
	err := s.read(ctx, "count the jobs of tenant "+tenant, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, tenantTopByStateQuery, tenant)
		if err != nil {
			return fmt.Errorf("count states: %w", err)
		}
		if err := scanAll(rows, func(k string, n int) { out[contracts.JobState(k)] = n }); err != nil {
			return fmt.Errorf("count states: %w", err)
		}
		var top int
		if err := tx.QueryRowContext(ctx, tenantTopQuery, tenant).Scan(&top); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		others := 0
		for st, n := range out {
			if st != contracts.StateSucceeded {
				others += n
			}
		}
		out[contracts.StateSucceeded] = top - others
		children := make([]int, len(contracts.AllStates))
		dest := make([]any, len(children))
		for i := range children {
			dest[i] = &children[i]
		}
		if err := tx.QueryRowContext(ctx, tenantChildrenByState, tenant).Scan(dest...); err != nil {
			return fmt.Errorf("count children's states: %w", err)
		}
		for i, st := range contracts.AllStates {
			out[st] += children[i]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
