// Package ratelimit holds token buckets (golang.org/x/time/rate) keyed by a
// string, such as a tenant or a client IP, in a bounded map.
//
// The map is an LRU list capped at a maximum number of keys: a key unused
// for longer than the idle time is dropped on the next insert, and when the
// map is full the least recently used key is dropped, so a client with many
// addresses cannot grow memory without bound. A dropped key starts again
// with a full bucket; once a key has been idle long enough to refill, that
// is exactly the state it would have had anyway.
package ratelimit

import (
	"container/list"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the map's bounds.
const (
	// DefaultMaxKeys bounds the number of keys held at once.
	DefaultMaxKeys = 10000
	// DefaultIdle is how long an unused key is kept.
	DefaultIdle = 3 * time.Minute
)

// Limiter is a set of token buckets, one per key, all with the same rate
// and burst. It is safe for concurrent use. A nil *Limiter allows
// everything.
type Limiter struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	idle    time.Duration
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element // of *entry
	lru  list.List                // front = most recently used
	// used counts the tokens Allow took per key since the last Drain,
	// when the limiter is shared (nil otherwise).
	used map[string]int
}

// entry is one key's bucket.
type entry struct {
	key  string
	lim  *rate.Limiter
	used time.Time
}

// Options bound a Limiter's map; zero values take the defaults.
type Options struct {
	// MaxKeys is the most keys held at once (DefaultMaxKeys).
	MaxKeys int
	// Idle is how long an unused key is kept (DefaultIdle).
	Idle time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Shared makes the limiter count what it lets through for Drain, so
	// that other replicas can Take as much (see Sharer).
	Shared bool
}

// maxUsedKeys bounds the keys counted between two Drains; past it, what
// other keys take goes unshared (each replica still limits them alone).
const maxUsedKeys = 10000

// New returns a limiter allowing perSecond requests per second per key
// with bursts of burst. perSecond <= 0 (or burst < 1) disables it: New
// returns nil, which allows everything.
func New(perSecond float64, burst int, o Options) *Limiter {
	if !(perSecond > 0) || burst < 1 || math.IsInf(perSecond, 0) {
		return nil
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var used map[string]int
	if o.Shared {
		used = map[string]int{}
	}
	return &Limiter{
		used:    used,
		limit:   rate.Limit(perSecond),
		burst:   burst,
		maxKeys: o.MaxKeys,
		idle:    o.Idle,
		now:     o.Now,
		keys:    map[string]*list.Element{},
	}
}

// Allow takes one token from key's bucket. When the bucket is empty it
// takes nothing and returns false with the time until a token will be
// there (always positive).
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	return l.AllowN(key, 1)
}

// AllowN takes n tokens from key's bucket at once: a request that costs
// n (one per job and per fan-out item). When the bucket holds fewer it
// takes nothing and returns false with the time until n tokens will be
// there (always positive). n above Burst can never be allowed: it returns
// false with no wait, and the caller must refuse the request for good.
func (l *Limiter) AllowN(key string, n int) (bool, time.Duration) {
	if l == nil || n < 1 {
		return true, 0
	}
	if n > l.burst {
		return false, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucket(key, now)
	r := lim.ReserveN(now, n)
	if !r.OK() {
		return false, 0 // cannot happen with n <= burst
	}
	delay := r.DelayFrom(now)
	if delay <= 0 {
		if l.used != nil {
			if _, ok := l.used[key]; ok || len(l.used) < maxUsedKeys {
				l.used[key] += n
			}
		}
		return true, 0
	}
	r.CancelAt(now)
	return false, delay
}

// Burst is the most tokens one request may take (0 for a nil limiter,
// which allows everything).
func (l *Limiter) Burst() int {
	if l == nil {
		return 0
	}
	return l.burst
}

// Take takes n tokens from key's bucket, however few it holds: requests
// another replica let through. The bucket may go below empty; it then
// refills from there, so the replicas together stay within the rate.
func (l *Limiter) Take(key string, n int) {
	if l == nil || n < 1 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucket(key, now)
	// A reservation beyond the burst is refused; a debt of one whole
	// burst already refuses everything for burst/rate, so clamp there.
	n = min(n, l.burst)
	lim.ReserveN(now, n)
}

// Reserve takes n tokens from key's bucket, however few it holds, and
// returns how long the caller must wait before it spends them: zero while
// the bucket held them, otherwise the time the rate takes to refill what
// was missing (what earlier calls took ahead of the rate included). It
// paces a cost counted only as it is spent, such as the bytes of a read:
// the caller takes each part as it comes and waits as told. A nil Limiter
// never asks to wait.
func (l *Limiter) Reserve(key string, n int) time.Duration {
	if l == nil || n < 1 {
		return 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucket(key, now)
	var wait time.Duration
	for n > 0 { // a reservation holds at most a burst
		k := min(n, l.burst)
		wait = lim.ReserveN(now, k).DelayFrom(now)
		n -= k
	}
	return wait
}

// Drain returns the tokens Allow took per key since the last Drain and
// starts counting again (nil when the limiter is not shared or nothing
// was taken).
func (l *Limiter) Drain() map[string]int {
	if l == nil || l.used == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.used) == 0 {
		return nil
	}
	out := l.used
	l.used = make(map[string]int, len(out))
	return out
}

// bucket returns key's bucket, creating it (and evicting idle or least
// recently used keys to make room) when it is missing. l.mu is held.
func (l *Limiter) bucket(key string, now time.Time) *rate.Limiter {
	if el, ok := l.keys[key]; ok {
		e := el.Value.(*entry)
		e.used = now
		l.lru.MoveToFront(el)
		return e.lim
	}
	for back := l.lru.Back(); back != nil; back = l.lru.Back() {
		e := back.Value.(*entry)
		if len(l.keys) < l.maxKeys && now.Sub(e.used) < l.idle {
			break
		}
		l.lru.Remove(back)
		delete(l.keys, e.key)
	}
	e := &entry{key: key, lim: rate.NewLimiter(l.limit, l.burst), used: now}
	l.keys[key] = l.lru.PushFront(e)
	return e.lim
}

// Len is the number of keys held.
func (l *Limiter) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
