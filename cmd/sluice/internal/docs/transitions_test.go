package docs

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

var transitionRow = regexp.MustCompile("(?m)^\\| `([a-z]+)` \\| `([a-z]+)` \\|")

// TestArchitectureTransitions fails when the transition table of
// docs/architecture.md and the state machine of pkg/contracts disagree:
// every allowed transition is listed once, and nothing else.
func TestArchitectureTransitions(t *testing.T) {
	t.Parallel()
	md := read(t, "docs/architecture.md")
	start := strings.Index(md, "<!-- transitions -->")
	end := strings.Index(md, "<!-- /transitions -->")
	require.True(t, start >= 0 && end > start, "docs/architecture.md has no <!-- transitions --> … <!-- /transitions --> table")

	doc := map[[2]contracts.JobState]bool{}
	for _, m := range transitionRow.FindAllStringSubmatch(md[start:end], -1) {
		from, to := contracts.JobState(m[1]), contracts.JobState(m[2])
		require.True(t, from.Valid() && to.Valid(), "%s → %s: not states", from, to)
		require.False(t, doc[[2]contracts.JobState{from, to}], "%s → %s is listed twice", from, to)
		doc[[2]contracts.JobState{from, to}] = true
	}
	for _, from := range contracts.AllStates {
		for _, to := range contracts.AllStates {
			allowed := contracts.CanTransition(from, to)
			listed := doc[[2]contracts.JobState{from, to}]
			require.Equal(t, allowed, listed, "%s → %s: allowed by contracts.CanTransition %v, listed in docs/architecture.md %v", from, to, allowed, listed)
		}
	}
}
