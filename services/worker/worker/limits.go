package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

// errRunLimit is behind the cause of a run stopped for passing its stall
// timeout or its max runtime.
var errRunLimit = errors.New("run limit")

// limitError says which limit a run passed; it is an errRunLimit.
type limitError string

func (e limitError) Error() string        { return string(e) }
func (e limitError) Is(target error) bool { return target == errRunLimit }

// stallCheck is how often, at the most, the stall watchdog looks; it looks
// more often for shorter timeouts.
const stallCheck = time.Second

// enforceLimits stops t's run when it passes its max runtime, or goes its
// stall timeout without a progress report or sign of life (th hears them),
// cancelling it with a timeout: error. It returns the function that ends
// the watch.
func (w *Worker) enforceLimits(ctx context.Context, t *task, th *progress.Throttle) func() {
	lim := t.job.RunLimits
	if lim.StallTimeout <= 0 && lim.MaxRuntime <= 0 {
		return func() {}
	}
	wctx, stop := context.WithCancel(ctx)
	stopped := func(why string) {
		t.cancel(&contracts.ClassedError{Class: contracts.ClassTimeout, Err: limitError(why)})
	}
	start := time.Now()
	var last atomic.Int64
	last.Store(start.UnixNano())
	if lim.StallTimeout > 0 {
		th.OnProgress(func() { last.Store(time.Now().UnixNano()) })
	}
	go func() {
		stall := time.Duration(lim.StallTimeout)
		period := stallCheck
		if stall > 0 {
			period = min(period, max(stall/10, 10*time.Millisecond))
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case now := <-tick.C:
				if lim.MaxRuntime > 0 && now.Sub(start) >= time.Duration(lim.MaxRuntime) {
					stopped(fmt.Sprintf("ran longer than its max_runtime %s", time.Duration(lim.MaxRuntime)))
					return
				}
				if stall > 0 && now.Sub(time.Unix(0, last.Load())) >= stall {
					stopped(fmt.Sprintf("no progress for %s (stall_timeout)", stall))
					return
				}
			}
		}
	}()
	return stop
}
