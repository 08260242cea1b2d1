package kinds

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limit  int
		writes []string
		want   string
	}{
		{"nothing", 4, nil, ""},
		{"under the limit", 4, []string{"ab"}, "ab"},
		{"exactly the limit", 4, []string{"ab", "cd"}, "abcd"},
		{"overflow across writes", 4, []string{"abc", "def"}, "cdef"},
		{"one big write", 4, []string{"abcdefgh"}, "efgh"},
		{"big write after small", 4, []string{"xy", "abcdefgh"}, "efgh"},
		{"many small writes", 3, strings.Split("abcdefg", ""), "efg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tl := newTail(tc.limit, nil)
			for _, w := range tc.writes {
				n, err := tl.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tc.want, tl.String())
		})
	}
}
