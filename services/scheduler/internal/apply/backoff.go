package apply

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// RetryDelay is how long a job waits before run number runs+1 after its
// runs-th run failed: exponential from initial, doubling per run, at most
// maxDelay, with ±50 % jitter so that jobs that failed together do not
// come back together.
func RetryDelay(runs int, initial, maxDelay time.Duration) time.Duration {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMaxInterval(maxDelay),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxElapsedTime(0),
	)
	d := initial
	for range max(runs, 1) {
		d = b.NextBackOff()
	}
	return min(d, maxDelay)
}
