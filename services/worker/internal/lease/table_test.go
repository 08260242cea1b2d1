package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func lz(id string, attempt int64) contracts.Lease {
	return contracts.Lease{JobID: id, Claim: attempt}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	_, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	require.True(t, tab.Add(lz("a", 2), cancel, t0))

	tests := []struct {
		name string
		l    contracts.Lease
		want lease.Status
	}{
		{"same lease", lz("a", 2), lease.Held},
		{"older attempt", lz("a", 1), lease.Conflict},
		{"newer attempt", lz("a", 3), lease.Conflict},
		{"other job", lz("b", 2), lease.Free},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tab.Lookup(tc.l))
		})
	}
}

func TestAddOnlyWhenFree(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	_, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	require.True(t, tab.Add(lz("a", 1), cancel, t0))
	require.False(t, tab.Add(lz("a", 1), cancel, t0))
	require.False(t, tab.Add(lz("a", 2), cancel, t0))
	require.Equal(t, 1, tab.Len())
	tab.Remove(lz("a", 2)) // another attempt: no effect
	require.Equal(t, 1, tab.Len())
	tab.Remove(lz("a", 1))
	require.Zero(t, tab.Len())
	require.Equal(t, lease.Free, tab.Lookup(lz("a", 1)))
}

func TestFenceAndCancel(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	ctxA, cancelA := context.WithCancelCause(context.Background())
	ctxB, cancelB := context.WithCancelCause(context.Background())
	defer cancelA(nil)
	defer cancelB(nil)
	require.True(t, tab.Add(lz("a", 1), cancelA, t0))
	require.True(t, tab.Add(lz("b", 1), cancelB, t0))

	require.False(t, tab.Fence(lz("a", 2), lease.ErrLost), "another attempt is not fenced")
	require.NoError(t, ctxA.Err())
	require.True(t, tab.Fence(lz("a", 1), lease.ErrLost))
	require.ErrorIs(t, context.Cause(ctxA), lease.ErrLost)
	fenced, cancelled := tab.Flags(lz("a", 1))
	require.True(t, fenced)
	require.False(t, cancelled)
	require.Equal(t, []contracts.Lease{lz("b", 1)}, tab.Active(), "a fenced lease is not renewed")

	require.True(t, tab.Cancel(lz("b", 1)))
	require.ErrorIs(t, context.Cause(ctxB), lease.ErrCancelRequested)
	fenced, cancelled = tab.Flags(lz("b", 1))
	require.False(t, fenced)
	require.True(t, cancelled)

	tab.Finish(lz("b", 1))
	require.Empty(t, tab.Active())
	require.False(t, tab.Cancel(lz("b", 1)), "a finished lease is not cancelled again")
	require.False(t, tab.Fence(lz("b", 1), lease.ErrLost), "a finished lease is not fenced")
	require.Equal(t, lease.Held, tab.Lookup(lz("b", 1)), "a finished lease is held until removed")
}

func TestUnacknowledged(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	_, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	require.True(t, tab.Add(lz("a", 1), cancel, t0))
	require.True(t, tab.Add(lz("b", 1), cancel, t0))
	require.True(t, tab.Add(lz("c", 1), cancel, t0))
	tab.Acked([]contracts.Lease{lz("b", 1), lz("zzz", 1), lz("c", 7)}, t0.Add(100*time.Millisecond))
	tab.Acked([]contracts.Lease{lz("b", 1)}, t0.Add(50*time.Millisecond)) // older ack changes nothing

	tests := []struct {
		name   string
		at     time.Duration
		maxAge time.Duration
		want   []contracts.Lease
	}{
		{"fresh", 100 * time.Millisecond, 200 * time.Millisecond, nil},
		{"exactly at the limit", 200 * time.Millisecond, 200 * time.Millisecond, nil},
		{"the unacknowledged ones are old", 250 * time.Millisecond, 200 * time.Millisecond, []contracts.Lease{lz("a", 1), lz("c", 1)}},
		{"all old", time.Second, 200 * time.Millisecond, []contracts.Lease{lz("a", 1), lz("b", 1), lz("c", 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tab.Unacknowledged(t0.Add(tc.at), tc.maxAge))
		})
	}
}

func TestStatusString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "free", lease.Free.String())
	require.Equal(t, "held", lease.Held.String())
	require.Equal(t, "conflict", lease.Conflict.String())
	require.Equal(t, "unknown", lease.Status(9).String())
}

func TestFenceIfUnacknowledged(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	l := lz("a", 1)
	require.True(t, tab.Add(l, cancel, t0))
	tab.Acked([]contracts.Lease{l}, t0.Add(time.Second))

	require.False(t, tab.FenceIfUnacknowledged(l, t0.Add(3*time.Second), 2*time.Second), "acknowledged 2s ago: still valid")
	require.NoError(t, ctx.Err())
	require.False(t, tab.FenceIfUnacknowledged(lz("a", 2), t0.Add(time.Hour), 2*time.Second), "another attempt")
	require.True(t, tab.FenceIfUnacknowledged(l, t0.Add(3*time.Second+time.Millisecond), 2*time.Second))
	require.ErrorIs(t, context.Cause(ctx), lease.ErrUnacknowledged)
	fenced, _ := tab.Flags(l)
	require.True(t, fenced)
	require.False(t, tab.FenceIfUnacknowledged(l, t0.Add(time.Hour), 2*time.Second), "fenced once")

	done := lz("b", 1)
	require.True(t, tab.Add(done, cancel, t0))
	tab.Finish(done)
	require.False(t, tab.FenceIfUnacknowledged(done, t0.Add(time.Hour), 2*time.Second), "a finished handler is not fenced")
}

// TestContextEndsWhenTheLeasePasses: the handler's context reads the clock
// against the lease: once the last acknowledgement is older than maxAge,
// Err fences the lease (through expired) before it answers, with no
// goroutine in between; an acknowledgement in time keeps it going.
func TestContextEndsWhenTheLeasePasses(t *testing.T) {
	t.Parallel()
	tab := lease.NewTable()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	l := contracts.Lease{JobID: "j", Claim: 1}
	parent, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	require.True(t, tab.Add(l, cancel, now))
	expired := 0
	ctx := tab.Context(parent, l, clock, 20*time.Second, func() {
		expired++
		tab.FenceIfUnacknowledged(l, clock(), 20*time.Second)
	})
	now = now.Add(19 * time.Second)
	require.NoError(t, ctx.Err())
	tab.Acked([]contracts.Lease{l}, now)
	now = now.Add(19 * time.Second)
	require.NoError(t, ctx.Err(), "renewed in time")
	now = now.Add(2 * time.Second)
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(ctx), lease.ErrUnacknowledged)
	require.Equal(t, 1, expired)
	fenced, _ := tab.Flags(l)
	require.True(t, fenced)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Done is not closed once the lease is fenced")
	}
	left, ok := tab.Left(l, now, 20*time.Second)
	require.True(t, ok)
	require.Zero(t, left, "a fenced lease has no time left")
}
