package httpapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestLaterProgress: a job stream never goes back to a progress event
// older than the one it sent, within an attempt; a new attempt starts over.
func TestLaterProgress(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(attempt int64, d time.Duration) contracts.Event {
		return contracts.Event{Type: contracts.EventProgress, Claim: attempt, At: t0.Add(d)}
	}
	tests := []struct {
		name     string
		ev, last contracts.Event
		want     bool
	}{
		{"first progress", at(1, 0), contracts.Event{}, true},
		{"newer", at(1, time.Millisecond), at(1, 0), true},
		{"same instant", at(1, 0), at(1, 0), true},
		{"older: a late publisher's earlier read", at(1, 0), at(1, time.Millisecond), false},
		{"new attempt, earlier clock", at(2, 0), at(1, time.Second), true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, laterProgress(tc.ev, tc.last), tc.name)
	}
}
