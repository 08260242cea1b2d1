package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// testHeartbeatConcurrent: a worker's start heartbeat and a periodic (or
// retried) heartbeat for the same claimed lease may reach two scheduler
// replicas at once. Whichever promotes the claim, the other must renew the
// lease, never report it lost: a lost lease stops a handler that the job's
// row says is running, and the job runs again only after it goes stale.
func testHeartbeatConcurrent(t *testing.T, s store.Store) {
	const jobs, racers = 8, 3
	for i := range jobs {
		j := claim(t, s, admitNew(t, s, "acme", at(time.Duration(i)*time.Second)), "w1", at(time.Minute), at(2*time.Minute))
		l := leaseOf(j)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes []store.HeartbeatOutcome
			errs     []error
		)
		ready := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-ready
				out, err := s.Heartbeat(t.Context(), "w1", []contracts.Lease{l}, at(time.Minute+time.Second), 0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				outcomes = append(outcomes, out)
			})
		}
		close(ready)
		wg.Wait()
		require.Empty(t, errs)
		promoted := 0
		for _, out := range outcomes {
			require.Empty(t, out.Lost, "job %d: a concurrent heartbeat of the same worker lost the lease", i)
			promoted += len(out.Promoted)
		}
		require.Equal(t, 1, promoted, "job %d: promoted exactly once", i)
		got := get(t, s, j.ID)
		require.Equal(t, contracts.StateRunning, got.State)
		require.Equal(t, "w1", got.Worker)
		require.Equal(t, 1, got.Attempt)
	}
}
