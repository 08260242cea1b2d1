package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// TestChangeGroupFindsRowsByRowid: the UPDATE of a group of changes
// looks each row up by the rowid its JSON row carries, and scans nothing.
func TestChangeGroupFindsRowsByRowid(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	sets, _, err := updateSets(store.Change{Now: time.Now(), State: contracts.StateSucceeded, Result: json.RawMessage(`1`)})
	require.NoError(t, err)
	plan := queryPlan(t, s, groupQuery(sets, 4, 8))
	require.Contains(t, plan, "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)")
	require.NotContains(t, plan, "SCAN jobs")
}

// TestChangeGroupExplainsMisses: in a group applied as one statement
// after a change that ran alone (which may move other rows), a change
// whose compare-and-set misses (the job is not at the claim expected) is
// that job's conflict, explained; the others are applied, each with its
// own values, and counted.
func TestChangeGroupExplainsMisses(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	now := time.Now()
	jobs := runningJobs(t, s, 3, now)
	before := s.WriteCounts()

	out := make([]store.Updated, len(jobs))
	err := s.write(ctx, store.WriteUpdate, "group", func(tx *sql.Tx) error {
		rows, err := s.jobRowsIn(ctx, tx, []string{jobs[0].ID, jobs[1].ID, jobs[2].ID})
		require.NoError(t, err)
		g := changeGroups{moved: true}
		for i, j := range jobs {
			exp := store.Expect{ID: j.ID, State: j.State, Claim: j.Claim}
			if i == 1 {
				exp.Claim-- // an older claim: the job moved on since
			}
			ch := store.Change{Now: now.Add(time.Duration(i) * time.Second), State: contracts.StateSucceeded,
				Result: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`)}
			require.NoError(t, g.add(grouped{i: i, row: rows[j.ID], exp: exp, ch: ch}))
		}
		require.Len(t, g.order, 1, "one shape, one group")
		query := groupQuery(g.order[0].sets, g.order[0].nargs, 2)
		queries, err := s.flushGroups(ctx, tx, &g, out, nil)
		require.Equal(t, []string{query}, queries, "the two unmoved in one statement")
		return err
	})
	require.NoError(t, err)
	require.ErrorIs(t, out[1].Err, store.ErrConflict)
	require.ErrorContains(t, out[1].Err, "expected running at")
	for _, i := range []int{0, 2} {
		require.NoError(t, out[i].Err)
		got, err := s.Get(ctx, jobs[i].ID)
		require.NoError(t, err)
		require.Equal(t, contracts.StateSucceeded, got.State)
		require.JSONEq(t, `{"n":`+string(rune('0'+i))+`}`, string(got.Result))
		require.True(t, got.FinishedAt.Equal(now.Add(time.Duration(i)*time.Second)), "job %d finished at its own time", i)
		require.Equal(t, got.State, out[i].Job.State)
	}
	got, err := s.Get(ctx, jobs[1].ID)
	require.NoError(t, err)
	require.Equal(t, contracts.StateRunning, got.State)
	require.Equal(t, uint64(2), s.WriteCounts().Rows[store.WriteUpdate]-before.Rows[store.WriteUpdate])
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.ByState[contracts.StateSucceeded])
	require.Equal(t, 1, st.ByState[contracts.StateRunning])
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

// TestChangeGroupUnexpectedMissFails: with no change run alone since the
// rows were read, a group's statement that sets fewer rows than it was
// given (a row moved behind the call's back) fails the call, which the
// write loop rolls back, rather than report a change it did not make.
func TestChangeGroupUnexpectedMissFails(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	now := time.Now()
	jobs := runningJobs(t, s, 2, now)
	out := make([]store.Updated, len(jobs))
	err := s.write(ctx, store.WriteUpdate, "group", func(tx *sql.Tx) error {
		rows, err := s.jobRowsIn(ctx, tx, []string{jobs[0].ID, jobs[1].ID})
		require.NoError(t, err)
		var g changeGroups
		for i, j := range jobs {
			exp := store.Expect{ID: j.ID, State: j.State, Claim: j.Claim - int64(i)}
			require.NoError(t, g.add(grouped{i: i, row: rows[j.ID], exp: exp, ch: store.Change{Now: now, State: contracts.StateSucceeded}}))
		}
		_, err = s.flushGroups(ctx, tx, &g, out, nil)
		return err
	})
	require.ErrorContains(t, err, "1 of 2 rows set")
	for _, j := range jobs {
		got, err := s.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, contracts.StateRunning, got.State, "rolled back")
	}
}

// TestChangeGroupWritesWhatOneUpdateWrites: changes of every field a
// result, a retry or a progress flush sets, applied to several jobs in
// one UpdateEach (a group statement), leave each job exactly as the same
// change applied to one job alone (its own UPDATE) leaves it.
func TestChangeGroupWritesWhatOneUpdateWrites(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	now := time.Now()
	at := now.Add(time.Minute)
	errText, none := "handler: boom", ""
	usage := &contracts.Usage{Mechanism: contracts.LimitCgroupV2, PeakMemory: 1 << 20, CPUSeconds: 0.25}
	cancel := true
	for name, change := range map[string]func(j contracts.Job) store.Change{
		"failed": func(j contracts.Job) store.Change {
			return store.Change{Now: now, State: contracts.StateFailed, Error: &errText, Result: json.RawMessage(`{"partial":true}`),
				Usage: usage, Errors: []contracts.RunError{{Attempt: 1, Claim: j.Claim, Error: errText, At: now}},
				Progress: &contracts.Progress{Percent: 50, Stage: "half"}}
		},
		"retry": func(j contracts.Job) store.Change {
			return store.RetryChange(j, store.Change{Now: now, State: contracts.StateFailed, Usage: usage,
				Errors: []contracts.RunError{{Attempt: 1, Claim: j.Claim, Error: errText, At: now}}}, at)
		},
		"progress": func(contracts.Job) store.Change {
			return store.Change{Now: now, State: contracts.StateRunning, Progress: &contracts.Progress{Percent: 10, Message: "it's \"quoted\""},
				HeartbeatAt: &at, CancelRequested: &cancel, Worker: &none}
		},
	} {
		t.Run(name, func(t *testing.T) {
			jobs := runningJobs(t, s, 4, now)
			decide := func(_ int, j contracts.Job) (store.Change, error) { return change(j), nil }
			grouped, err := s.UpdateEach(ctx, []string{jobs[0].ID, jobs[1].ID, jobs[2].ID}, decide)
			require.NoError(t, err)
			alone, err := s.UpdateEach(ctx, []string{jobs[3].ID}, decide)
			require.NoError(t, err)
			want, err := s.Get(ctx, jobs[3].ID)
			require.NoError(t, err)
			for i, u := range grouped {
				require.NoError(t, u.Err)
				got, err := s.Get(ctx, jobs[i].ID)
				require.NoError(t, err)
				got.ID, got.CreatedAt, got.FairAt = want.ID, want.CreatedAt, want.FairAt
				require.Equal(t, want, got, "job %d", i)
				u.Job.ID, u.Job.CreatedAt, u.Job.FairAt = alone[0].Job.ID, alone[0].Job.CreatedAt, alone[0].Job.FairAt
				require.Equal(t, alone[0].Job, u.Job, "job %d as returned", i)
			}
		})
	}
}
