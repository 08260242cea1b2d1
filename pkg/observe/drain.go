package observe

import (
	"context"
	"sync"
	"time"
)

// DrainContext returns a context for work that must outlive ctx by at most
// grace: it keeps ctx's values, is not cancelled when ctx ends, and is
// cancelled grace after that (or when cancel is called). A service uses it
// for the work in flight when its shutdown begins, so that work may finish
// within SLUICE_SHUTDOWN_TIMEOUT instead of being cut at once. It starts no
// goroutine; call cancel when the work is done.
func DrainContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if dctx.Err() == nil {
			timer = time.AfterFunc(grace, cancelDrain)
		}
	})
	return dctx, func() {
		stopAfter()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancelDrain()
	}
}
