// Package inputs fetches a run's pinned inputs into a content-addressed
// cache on the worker and hands the handler local read-only paths.
//
// Each input is fetched (file:// or http(s)://, behind the Fetcher
// interface, with a timeout and a size limit), its SHA-256 checked while it
// streams to disk, and kept under its digest: two runs that need the same
// digest fetch it once, also at the same time. The cache holds at most its
// byte bound; what no run uses is evicted least recently used first, and an
// entry in use is never evicted. A digest mismatch, a missing file or a
// fetch the server refused fails the run input: (it cannot get better); a
// network error is an ordinary failure, retried.
package inputs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Cache is a worker's content-addressed input cache. It is safe for
// concurrent use.
type Cache struct {
	dir      string
	maxBytes int64
	fetch    Fetcher
	group    singleflight.Group

	mu      sync.Mutex
	entries map[string]*entry
	size    int64
	fetches int
}

// entry is one cached input.
type entry struct {
	size int64
	refs int
	used time.Time
}

// Open returns a cache in dir (emptied: what an earlier process left is
// not trusted) holding at most maxBytes, fetching with fetch.
func Open(dir string, maxBytes int64, fetch Fetcher) (*Cache, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	return &Cache{dir: dir, maxBytes: maxBytes, fetch: fetch, entries: map[string]*entry{}}, nil
}

// Fetches is how many fetches the cache made (for tests and metrics).
func (c *Cache) Fetches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetches
}

// Acquire makes every input local and returns their paths by name, and the
// function that gives them back (call it once the run ended).
func (c *Cache) Acquire(ctx context.Context, refs []contracts.InputRef) (map[string]string, func(), error) {
	paths := map[string]string{}
	var held []string
	release := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range held {
			if e := c.entries[d]; e != nil {
				e.refs--
			}
		}
		held = nil
	}
	for _, r := range refs {
		path, err := c.acquire(ctx, r)
		if err != nil {
			release()
			return nil, func() {}, err
		}
		held = append(held, r.SHA256)
		paths[r.Name] = path
	}
	return paths, release, nil
}

// acquire takes one reference on r's digest, fetching it first if need be.
func (c *Cache) acquire(ctx context.Context, r contracts.InputRef) (string, error) {
	path := filepath.Join(c.dir, r.SHA256)
	for {
		c.mu.Lock()
		if e, ok := c.entries[r.SHA256]; ok {
			e.refs++
			e.used = time.Now()
			c.mu.Unlock()
			return path, nil
		}
		c.mu.Unlock()
		_, err, _ := c.group.Do(r.SHA256, func() (any, error) { return nil, c.load(ctx, r, path) })
		if err != nil {
			return "", err
		}
		// Loaded: take the reference (unless evicted meanwhile: load again).
	}
}

// load fetches r to path, checking its digest as it streams, and enters
// it in the cache (evicting what no run uses to stay within the bound).
func (c *Cache) load(ctx context.Context, r contracts.InputRef, path string) error {
	c.mu.Lock()
	_, ok := c.entries[r.SHA256]
	c.mu.Unlock()
	if ok {
		return nil // entered by a load that just ended
	}
	tmp, err := os.CreateTemp(c.dir, "fetch-*")
	if err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	h := sha256.New()
	c.mu.Lock()
	c.fetches++
	c.mu.Unlock()
	n, err := c.fetch.Fetch(ctx, r.URI, io.MultiWriter(tmp, h), c.maxBytes)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("input %s: %w", r.Name, err)
	}
	// The digest found is not told: it would hash whatever the URI reached.
	if hex.EncodeToString(h.Sum(nil)) != r.SHA256 {
		return &contracts.ClassedError{Class: contracts.ClassInput,
			Err: fmt.Errorf("input %s: %s does not match its pinned sha256 %s", r.Name, r.URI, r.SHA256)}
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[r.SHA256] = &entry{size: n, used: time.Now()}
	c.size += n
	c.evictLocked(r.SHA256)
	return nil
}

// evictLocked removes unused entries, least recently used first, until the
// cache is within its bound; keep is never removed. Callers hold mu.
func (c *Cache) evictLocked(keep string) {
	if c.size <= c.maxBytes {
		return
	}
	type cand struct {
		digest string
		used   time.Time
	}
	var cs []cand
	for d, e := range c.entries {
		if e.refs == 0 && d != keep {
			cs = append(cs, cand{d, e.used})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].used.Before(cs[j].used) })
	for _, x := range cs {
		if c.size <= c.maxBytes {
			return
		}
		if err := os.Remove(filepath.Join(c.dir, x.digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		c.size -= c.entries[x.digest].size
		delete(c.entries, x.digest)
	}
}
