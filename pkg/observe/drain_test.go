package observe

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrainContextOutlivesItsParentByTheGrace(t *testing.T) {
	t.Parallel()
	parent, stop := context.WithCancel(context.Background())
	dctx, cancel := DrainContext(parent, 50*time.Millisecond)
	defer cancel()

	stop()
	require.NoError(t, dctx.Err(), "the drain context must outlive its parent")
	select {
	case <-dctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the drain context was not cancelled after the grace")
	}
}

func TestDrainContextCancel(t *testing.T) {
	t.Parallel()
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	dctx, cancel := DrainContext(parent, time.Hour)
	require.NoError(t, dctx.Err())
	cancel()
	require.Error(t, dctx.Err())
	stop() // the parent ending after cancel starts no timer
	require.Error(t, dctx.Err())
}
