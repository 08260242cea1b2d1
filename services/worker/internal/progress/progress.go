// Package progress carries a handler's progress reports from the handler's
// context to the scheduler, throttled so a chatty handler cannot flood
// NATS or the store.
//
// A Throttle sends the first report at once and then at most one report per
// interval: reports in between replace each other, and the latest is sent
// when the interval ends (latest wins, nothing older is ever sent after
// something newer). Stop drops whatever is still waiting.
package progress

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// ErrNoJob means the context does not belong to a running job's handler.
var ErrNoJob = errors.New("progress: not called from a running job's handler")

type ctxKey struct{}

// With returns ctx carrying t, for the handler of one attempt.
func With(ctx context.Context, t *Throttle) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// Report sends p for the job whose handler ctx belongs to. It checks p
// (percent within 0..100, short stage and message) and never blocks.
func Report(ctx context.Context, p contracts.Progress) error {
	t, ok := ctx.Value(ctxKey{}).(*Throttle)
	if !ok || t == nil {
		return ErrNoJob
	}
	if err := p.Check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	t.Report(p)
	return nil
}

// Alive tells the job whose handler ctx belongs to that its work moves on
// without a report to show (an exec job's line of output): it counts as
// progress for the job's stall timeout. Outside a handler it does nothing.
func Alive(ctx context.Context) {
	if t, ok := ctx.Value(ctxKey{}).(*Throttle); ok && t != nil {
		t.alive()
	}
}

// Throttle rate-limits one attempt's progress reports. Its methods are
// safe for concurrent use.
type Throttle struct {
	interval time.Duration
	send     func(contracts.Progress)
	now      func() time.Time

	mu       sync.Mutex
	last     time.Time
	pending  *contracts.Progress
	timer    *time.Timer
	stopped  bool
	sent     int
	coalesce int
	// touched, when set, hears of every report and sign of life (the
	// stall watchdog).
	touched func()
}

// OnProgress makes t call fn at every report and every Alive (fn must not
// block). Call it before the handler starts.
func (t *Throttle) OnProgress(fn func()) { t.touched = fn }

// alive passes a sign of life on to the watchdog.
func (t *Throttle) alive() {
	if t.touched != nil {
		t.touched()
	}
}

// NewThrottle returns a Throttle calling send at most once per interval.
// send must not block for long (a NATS publish). now nil means time.Now.
func NewThrottle(interval time.Duration, send func(contracts.Progress), now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{interval: interval, send: send, now: now}
}

// Report sends p now if the interval since the last send has passed, and
// otherwise keeps it (replacing any report kept before) to send when it
// has.
func (t *Throttle) Report(p contracts.Progress) {
	t.alive()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	now := t.now()
	if t.pending == nil && (t.last.IsZero() || now.Sub(t.last) >= t.interval) {
		t.last = now
		t.sent++
		t.send(p)
		return
	}
	if t.pending != nil {
		t.coalesce++
	}
	t.pending = &p
	if t.timer == nil {
		wait := t.interval - now.Sub(t.last)
		t.timer = time.AfterFunc(max(wait, 0), t.flush)
	}
}

// flush sends the kept report when its interval ended.
func (t *Throttle) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	if t.stopped || t.pending == nil {
		return
	}
	p := *t.pending
	t.pending = nil
	t.last = t.now()
	t.sent++
	t.send(p)
}

// Stop ends the throttle: a kept report is dropped and nothing is sent
// afterwards. It returns how many reports were sent and how many were
// replaced by a newer one before they could be.
func (t *Throttle) Stop() (sent, coalesced int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.pending = nil
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	return t.sent, t.coalesce
}
