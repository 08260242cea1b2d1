package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestStoredNamesOfAttemptAndClaim: the columns kept the names they had
// before the API renamed the two counters (attempt holds the claim, runs
// the run number, a run error's "run" the run and "attempt" the claim), so
// a row an earlier release wrote reads right and this release writes the
// same shape: no migration.
func TestStoredNamesOfAttemptAndClaim(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	j, adm, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)

	// A row as 0.12 left it: its fifth claim, its second run, the first
	// run's error at claim 3.
	_, err = s.w.ExecContext(ctx, `UPDATE jobs SET attempt = 5, runs = 2,
		errors = '[{"run":1,"attempt":3,"error":"handler: boom","at":"2026-11-27T10:00:00Z"}]' WHERE id = ?`, j.ID)
	require.NoError(t, err)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.Attempt)
	require.EqualValues(t, 5, got.Claim)
	require.Equal(t, []contracts.RunError{{Attempt: 1, Claim: 3, Error: "handler: boom",
		At: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}}, got.Errors)

	// Written back by this release: the same keys.
	errs := append(got.Errors, contracts.RunError{Attempt: 2, Claim: 5, Error: "handler: again", At: got.Errors[0].At})
	_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 5},
		store.Change{Now: time.Now(), State: contracts.StatePending, Claim: 6, Errors: errs})
	require.NoError(t, err)
	var claim, runs int64
	var stored string
	require.NoError(t, s.w.QueryRowContext(ctx, `SELECT attempt, runs, errors FROM jobs WHERE id = ?`, j.ID).Scan(&claim, &runs, &stored))
	require.EqualValues(t, 6, claim, "the attempt column holds the claim")
	require.EqualValues(t, 2, runs, "the runs column holds the run number")
	require.JSONEq(t, `[{"run":1,"attempt":3,"error":"handler: boom","at":"2026-11-27T10:00:00Z"},
		{"run":2,"attempt":5,"error":"handler: again","at":"2026-11-27T10:00:00Z"}]`, stored)
}
