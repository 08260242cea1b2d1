package cli

import (
	"io"
	"sync/atomic"
	"time"
)

// idleCloser closes a stream that sends nothing, not even a keep-alive
// comment, for longer than its timeout, so a silently dead connection ends
// the read instead of hanging it.
type idleCloser struct {
	rc      io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	closed  atomic.Bool
}

// newIdleCloser watches rc; a timeout ≤ 0 never fires.
func newIdleCloser(rc io.ReadCloser, timeout time.Duration) *idleCloser {
	ic := &idleCloser{rc: rc, timeout: timeout}
	if timeout > 0 {
		ic.timer = time.AfterFunc(timeout, func() {
			ic.closed.Store(true)
			_ = rc.Close()
		})
	}
	return ic
}

// Read implements io.Reader; every read that returns data restarts the
// timer.
func (ic *idleCloser) Read(p []byte) (int, error) {
	n, err := ic.rc.Read(p)
	if n > 0 && ic.timer != nil {
		ic.timer.Reset(ic.timeout)
	}
	return n, err
}

// fired reports whether the stream was closed for being idle.
func (ic *idleCloser) fired() bool { return ic.closed.Load() }

// stop stops the timer.
func (ic *idleCloser) stop() {
	if ic.timer != nil {
		ic.timer.Stop()
	}
}
