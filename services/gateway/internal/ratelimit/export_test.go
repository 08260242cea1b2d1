package ratelimit

// Tokens is what key's bucket holds now (a full bucket when it has none).
func (l *Limiter) Tokens(key string) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bucket(key, l.now()).TokensAt(l.now())
}
