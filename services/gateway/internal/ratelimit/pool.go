package ratelimit

import "sync"

// Pool counts what is held at once (open event streams, hashes under
// way), in all and per key (a tenant): a key holds at most its share, so
// one key never takes the whole pool; past its share it is refused
// (PoolKeyFull), past the pool everyone is (PoolFull). It is safe for
// concurrent use.
type Pool struct {
	max, keyMax int

	mu    sync.Mutex
	held  int
	byKey map[string]int
}

// NewPool returns a pool of size places, at most keyMax of them for one
// key (keyMax is cut to size; both at least 1).
func NewPool(size, keyMax int) *Pool {
	size = max(size, 1)
	return &Pool{max: size, keyMax: min(max(keyMax, 1), size), byKey: map[string]int{}}
}

// Refusal says whether a place was taken, and why not.
type Refusal int

const (
	// PoolTaken: the place is the caller's until it calls Release.
	PoolTaken Refusal = iota
	// PoolKeyFull: the key holds its whole share.
	PoolKeyFull
	// PoolFull: every place of the pool is held.
	PoolFull
)

// Take takes one place for key, or says why it cannot.
func (p *Pool) Take(key string) Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.byKey[key] >= p.keyMax:
		return PoolKeyFull
	case p.held >= p.max:
		return PoolFull
	}
	p.held++
	p.byKey[key]++
	return PoolTaken
}

// Release gives back one place Take gave key.
func (p *Pool) Release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held--
	if n := p.byKey[key] - 1; n > 0 {
		p.byKey[key] = n
	} else {
		delete(p.byKey, key)
	}
}

// KeyMax is one key's share.
func (p *Pool) KeyMax() int { return p.keyMax }

// Max is the whole pool.
func (p *Pool) Max() int { return p.max }
