package sqlite

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestBatchRowsMatchSingleRows admits the same jobs alone and as one
// batch and requires every column to hold the same value with the same
// SQL type: the batch goes in as JSON rows, the single job with bound
// arguments.
func TestBatchRowsMatchSingleRows(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	now := time.Now().UTC()
	runAt := now.Add(time.Minute)
	rich := func(id string) contracts.Job {
		j := storetest.NewJob("acme", now)
		j.ID = id
		j.Payload = json.RawMessage(`{"s":"quote \" back \\ tab \t nl \n ctl \u0001 é 😀","n":-1.5e300}`)
		j.Key = "dedup-" + id
		j.RunAt = &runAt
		j.NextDispatchAt = &runAt
		j.ConcurrencyKey = "ck"
		j.ConcurrencyLimit = 2
		j.StallTimeout = contracts.Duration(3 * time.Second)
		j.MaxRuntime = contracts.Duration(time.Hour)
		j.Inputs = []contracts.InputRef{{Name: "model", URI: "file:///m", SHA256: strings.Repeat("a", 64)}}
		return j
	}
	plain := func(id string) contracts.Job {
		j := storetest.NewJob("globex", now)
		j.ID = id
		j.Payload = nil
		return j
	}
	caps := store.Caps{Weight: 2.5}
	for _, j := range []contracts.Job{rich("one-rich"), plain("one-plain")} {
		_, adm, err := s.Admit(t.Context(), j, caps)
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
	}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{
		{Job: rich("many-rich"), Caps: caps}, {Job: plain("many-plain"), Caps: caps},
	})
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, store.Admitted, r.Admission)
	}
	// fair_at differs by design (later admissions stamp later); compare
	// everything else, value and type.
	cols := strings.Split(insertColumns, ",")
	for i := range cols {
		cols[i] = strings.TrimSpace(cols[i])
	}
	row := func(id string) []string {
		exprs := make([]string, 0, 2*len(cols))
		for _, c := range cols {
			if c == "fair_at" || c == "id" || c == "key" {
				exprs = append(exprs, "typeof("+c+")", "typeof("+c+")")
				continue
			}
			exprs = append(exprs, "typeof("+c+")", "quote("+c+")")
		}
		vals := make([]string, len(exprs))
		ptrs := make([]any, len(exprs))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, s.r.QueryRowContext(t.Context(),
			"SELECT "+strings.Join(exprs, ", ")+" FROM jobs WHERE id = ?", id).Scan(ptrs...))
		return vals
	}
	for _, kind := range []string{"rich", "plain"} {
		one, many := row("one-"+kind), row("many-"+kind)
		for i := range one {
			require.Equal(t, one[i], many[i], fmt.Sprintf("%s job, column %s", kind, cols[i/2]))
		}
	}
	got, err := s.Get(t.Context(), "many-rich")
	require.NoError(t, err)
	require.JSONEq(t, string(rich("x").Payload), string(got.Payload))
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `"\`, "\x00\x1f\n\r\t", "é😀", "bad \xff utf8"} {
		var back string
		require.NoError(t, json.Unmarshal(appendJSONString(nil, s), &back))
		want := strings.ToValidUTF8(s, "\ufffd")
		require.Equal(t, want, back)
	}
}
