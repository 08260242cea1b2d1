package envconfig

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		check func(p *Problems)
		want  string // "" = no problem
	}{
		{"positive duration", func(p *Problems) { Positive(p, "V", time.Second) }, ""},
		{"zero duration", func(p *Problems) { Positive(p, "V", time.Duration(0)) }, "V: must be positive, got 0s"},
		{"NaN rate", func(p *Problems) { Positive(p, "V", math.NaN()) }, "V: must be positive, got NaN"},
		{"zero allowed", func(p *Problems) { NotNegative(p, "V", 0, "off") }, ""},
		{"negative", func(p *Problems) { NotNegative(p, "V", -time.Second, "never") }, "V: must not be negative (0 = never), got -1s"},
		{"in range", func(p *Problems) { Between(p, "V", 4, 1, 4) }, ""},
		{"out of range", func(p *Problems) { Between(p, "V", int64(5), 1, 4) }, "V: must be between 1 and 4, got 5"},
		{"add", func(p *Problems) { p.Add("V", "%q is not a kind", "x y") }, `V: "x y" is not a kind`},
		{"wrap", func(p *Problems) { p.Wrap("V", errors.New("bad entry")) }, "V: bad entry"},
		{"wrap nil", func(p *Problems) { p.Wrap("V", nil) }, ""},
		{"include", func(p *Problems) { p.Include(errors.New("W: named already")) }, "W: named already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p Problems
			tc.check(&p)
			if tc.want == "" {
				require.NoError(t, p.Err())
				return
			}
			require.EqualError(t, p.Err(), tc.want)
		})
	}
}

func TestProblemsJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	var p Problems
	Positive(&p, "A", 0)
	Positive(&p, "B", 0)
	require.EqualError(t, p.Err(), "A: must be positive, got 0\nB: must be positive, got 0")
}
