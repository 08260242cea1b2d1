package contracts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestCountItems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		body  string
		batch bool
		limit int
		want  int
	}{
		{"plain job", `{"kind":"k","payload":{"items":[1,2,3]}}`, false, 0, 1},
		{"fan-out", `{"kind":"k","items":[1,{"a":[1,2]},[3,4],"x",null]}`, false, 0, 6},
		{"items not an array", `{"kind":"k","items":{"a":1,"b":2}}`, false, 0, 1},
		{"items twice count twice", `{"items":[1,2],"items":[3]}`, false, 0, 4},
		{"batch", `{"jobs":[{"kind":"k"},{"kind":"k","items":[1,2]},{"kind":"k","payload":{"items":[1]}}]}`, true, 0, 5},
		{"batch job not an object", `{"jobs":[1,"x",{"items":[1]}]}`, true, 0, 4},
		{"nested jobs key is no batch", `{"x":{"jobs":[{"items":[1]}]}}`, true, 0, 0},
		{"stops past the limit", `{"kind":"k","items":[1,2,3,4,5,6,7,8,9]}`, false, 3, 4},
		{"malformed counts up to the error", `{"kind":"k","items":[1,2,}`, false, 0, 3},
		{"not JSON", `nope`, false, 0, 1},
		{"no items key", `{"kind":"k","payload":"xyz"}`, false, 0, 1},
		{"escaped items key", `{"kind":"k","\u0069tems":[1,2]}`, false, 0, 3},
		{"upper-case items key", `{"kind":"k","ITEMS":[1,2]}`, false, 0, 3},
		{"long-s items key", `{"kind":"k","itemſ":[1,2]}`, false, 0, 3},
		{"empty", ``, true, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, contracts.CountItems([]byte(tc.body), tc.batch, tc.limit))
		})
	}
}

// FuzzCountItems checks the count of any body is never below what the
// decoders admit: a fan-out's items plus one, per job.
func FuzzCountItems(f *testing.F) {
	f.Add([]byte(`{"kind":"k","items":[1,2]}`))
	f.Add([]byte(`{"jobs":[{"kind":"k","items":[1,2]},{"kind":"k"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if b, err := contracts.DecodeBatch(data); err == nil {
			want := 0
			for _, raw := range b.Jobs {
				want += submitItems(raw)
			}
			require.GreaterOrEqual(t, contracts.CountItems(data, true, 0), want)
		}
		if want := submitItems(data); want > 0 {
			require.GreaterOrEqual(t, contracts.CountItems(data, false, 0), want)
		}
	})
}

// submitItems is the items of a submit body as decoded (0 when it does not decode).
func submitItems(data []byte) int {
	r, err := contracts.DecodeSubmit(data)
	if err != nil {
		return 0
	}
	if len(r.Items) == 0 {
		return 1
	}
	items, err := contracts.SplitItems(r.Items)
	if err != nil {
		return 1
	}
	return contracts.JobItems(len(items))
}
