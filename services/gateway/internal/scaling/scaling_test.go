package scaling

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestLogKeepsTheLatestNewestFirst(t *testing.T) {
	t.Parallel()
	var l Log
	require.Empty(t, l.Recent())
	for i := range MaxRecent + 3 {
		l.Record(contracts.ScaleRequest{Kind: fmt.Sprintf("k%d", i), Ready: i})
	}
	got := l.Recent()
	require.Len(t, got, MaxRecent)
	require.Equal(t, fmt.Sprintf("k%d", MaxRecent+2), got[0].Kind)
	require.Equal(t, "k3", got[MaxRecent-1].Kind)
}
