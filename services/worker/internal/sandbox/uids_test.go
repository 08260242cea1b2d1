package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Range
		err  string
	}{
		{in: "", want: Range{}},
		{in: "  ", want: Range{}},
		{in: "1000-1009", want: Range{First: 1000, Last: 1009}},
		{in: " 7 - 7 ", want: Range{First: 7, Last: 7}},
		{in: DefaultUIDs, want: Range{First: 1900000000, Last: 1900065535}},
		{in: "1000", err: "not first-last"},
		{in: "0-10", err: "uid 0 is root"},
		{in: "10-9", err: "below the first"},
		{in: "1-4294967295", err: "not a uid"},
		{in: "a-b", err: "both ends must be uids"},
		{in: "-5-10", err: "both ends must be uids"},
	} {
		got, err := ParseRange(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.Equal(t, tc.want.Len(), int(tc.want.Last)-int(tc.want.First)+1-boolInt(tc.want.IsZero()), tc.in)
		again, err := ParseRange(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
