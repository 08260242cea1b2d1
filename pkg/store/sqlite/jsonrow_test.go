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
// SQL type: the batch goes in as rows of VALUES, a single job with bound
// arguments (a plain one binds only its dense columns, a fan-out parent
// every column). With n jobs of each shape: 37 rows go in statements of
// several sizes (8 × 4 + 4 + 1 plain rows, 4 × 9 + 1 of the others).
func TestBatchRowsMatchSingleRows(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 37} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			testBatchRowsMatchSingleRows(t, n)
		})
	}
}

func testBatchRowsMatchSingleRows(t *testing.T, n int) {
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
	parent := func(id string) contracts.Job {
		j := storetest.NewJob("initech", now)
		j.ID = id
		j.Payload = nil
		j.Concurrency = 2
		j.FailFast = true
		return j
	}
	items := []json.RawMessage{json.RawMessage(`{"i":0}`), json.RawMessage(`{"i":1}`), json.RawMessage(`{"i":2}`)}
	// The i-th job of a shape: the odd ones differ in payload and priority.
	nth := func(make func(string) contracts.Job, id string, i int) contracts.Job {
		j := make(id)
		if i%2 == 1 {
			j.Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			j.Priority = 7
		}
		return j
	}
	caps := store.Caps{Weight: 2.5}
	var reqs []store.AdmitRequest
	for i := range n {
		for _, j := range []contracts.Job{nth(rich, fmt.Sprintf("one-rich-%d", i), i), nth(plain, fmt.Sprintf("one-plain-%d", i), i)} {
			_, adm, err := s.Admit(t.Context(), j, caps)
			require.NoError(t, err)
			require.Equal(t, store.Admitted, adm)
		}
		one, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: nth(parent, fmt.Sprintf("one-parent-%d", i), i), Caps: caps, Items: items}})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, one[0].Admission)
		reqs = append(reqs, store.AdmitRequest{Job: nth(rich, fmt.Sprintf("many-rich-%d", i), i), Caps: caps},
			store.AdmitRequest{Job: nth(plain, fmt.Sprintf("many-plain-%d", i), i), Caps: caps},
			store.AdmitRequest{Job: nth(parent, fmt.Sprintf("many-parent-%d", i), i), Caps: caps, Items: items})
	}
	res, err := s.AdmitBatch(t.Context(), reqs)
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
	for i := range n {
		for _, kind := range []string{"rich", "plain", "parent"} {
			one, many := row(fmt.Sprintf("one-%s-%d", kind, i)), row(fmt.Sprintf("many-%s-%d", kind, i))
			for c := range one {
				require.Equal(t, one[c], many[c], fmt.Sprintf("%s job %d, column %s", kind, i, cols[c/2]))
			}
		}
	}
	got, err := s.Get(t.Context(), "many-rich-0")
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
