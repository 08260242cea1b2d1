// Package inputs fetches a run's pinned inputs into a content-addressed
// cache on the worker and hands each run private read-only copies.
//
// Each input is fetched (file:// or http(s)://, behind the Fetcher
// interface, with a timeout and a size limit), its SHA-256 checked while it
// streams to disk, and kept under its digest: one copy of the bytes
// whichever tenants use them. A digest alone grants nothing: a tenant is
// handed cached content only after it fetched that content itself and it
// matched (a grant, see grants.go), and only for a URI the fetch rules
// allow (Fetcher.Check), so a run never gets bytes its own fetch could
// not have got. Two runs of one tenant that need the same input fetch it
// once, also at the same time. The cache holds at most its byte bound and
// its grant bound; what no run uses is evicted least recently used first,
// and an entry being copied for a run is never evicted. A digest
// mismatch, a missing file or a fetch refused (by the server or by the
// rules) fails the run input: (it cannot get better); a network error is
// an ordinary failure, retried.
//
// A run reads its own copy (a reflink where the filesystem can, else a
// copy), hashed as it is made: no run can change what another run reads,
// and a cached file whose bytes no longer match its digest is evicted and
// fetched again, never handed out (see handout.go).
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
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Cache is a worker's content-addressed input cache. It is safe for
// concurrent use.
type Cache struct {
	dir       string
	maxBytes  int64
	maxGrants int
	fetch     Fetcher
	group     singleflight.Group

	mu        sync.Mutex
	entries   map[string]*entry
	size      int64  // bytes of the cached files
	grants    int    // grants of all entries
	clock     uint64 // counts uses: orders them for eviction
	fetches   int
	evicted   int
	rechecked int
	handouts  [2]int // by handout
}

// entry is one cached input: one file, whichever tenants may use it.
type entry struct {
	size  int64
	refs  int
	used  uint64 // the clock at its last use by any tenant
	stamp stamp  // as last checked
	// grants are the tenants that fetched this content themselves and
	// found it matched, with the clock at their last use: only they are
	// handed it.
	grants map[string]uint64
}

// Open returns a cache in dir (emptied: what an earlier process left is
// not trusted, and no grant outlives the process) holding at most
// maxBytes, fetching with fetch.
func Open(dir string, maxBytes int64, fetch Fetcher) (*Cache, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	return &Cache{dir: dir, maxBytes: maxBytes, maxGrants: MaxGrants, fetch: fetch, entries: map[string]*entry{}}, nil
}

// Stats are a cache's counts since Open (for tests and metrics).
type Stats struct {
	// Fetches is how many fetches the cache made.
	Fetches int
	// Rechecked is how many cached files were hashed again because they
	// changed since they were checked, and still matched.
	Rechecked int
	// Evicted is how many cached files were dropped because they no
	// longer matched their digest (or had gone).
	Evicted int
	// Entries, Bytes and Grants are what the cache holds now: cached
	// files, their bytes, and tenants' grants on them.
	Entries int
	Bytes   int64
	Grants  int
	// Reflinks and Copies are how the runs' copies were made.
	Reflinks, Copies int
}

// Stats returns the cache's counts.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Fetches: c.fetches, Rechecked: c.rechecked, Evicted: c.evicted,
		Entries: len(c.entries), Bytes: c.size, Grants: c.grants,
		Reflinks: c.handouts[handoutReflink], Copies: c.handouts[handoutCopy]}
}

// handoutTries bounds the tries to hand out one input whose cached file
// keeps changing (each try rechecks it, or evicts and fetches it again).
const handoutTries = 3

// Acquire makes every input of a run of tenant local and places a
// private read-only copy of each in dir (which the caller made for this
// run alone and removes when the run ends), named after the input; it
// returns their paths by name. An input's URI must pass the fetch rules
// first, cached or not, and a cached input is handed only to a tenant that
// fetched it itself: any other fetches it (and then holds a grant too).
// What a run does to its copies reaches no other run and not the cache.
func (c *Cache) Acquire(ctx context.Context, tenant string, refs []contracts.InputRef, dir string) (map[string]string, error) {
	paths := make(map[string]string, len(refs))
	for _, r := range refs {
		dst := filepath.Join(dir, r.Name)
		if err := c.handOut(ctx, tenant, r, dst); err != nil {
			return nil, err
		}
		paths[r.Name] = dst
	}
	return paths, nil
}

// handOut copies r's cached file to dst, fetching it first if need be
// (and if the rules allow r's URI: the refusal is the fetch's own). A
// cached file changed since it was stamped is hashed again: stamped anew
// if it still matches, evicted and fetched again if not.
func (c *Cache) handOut(ctx context.Context, tenant string, r contracts.InputRef, dst string) error {
	if err := c.fetch.Check(r.URI); err != nil {
		return fmt.Errorf("input %s: %w", r.Name, err)
	}
	for range handoutTries {
		e, path, stamped, err := c.acquire(ctx, tenant, r)
		if err != nil {
			return err
		}
		how, err := place(ctx, path, dst, stamped)
		if errors.Is(err, errChanged) {
			err = c.recheck(ctx, r.SHA256, e)
		}
		c.release(e)
		switch {
		case errors.Is(err, errChanged):
			// Rechecked and still right: copy again.
		case err == nil:
			c.mu.Lock()
			c.handouts[how]++
			c.mu.Unlock()
			return nil
		case errors.Is(err, errDiffers), errors.Is(err, errGone):
			c.evict(r.SHA256, e) // changed or removed behind the cache's back
		default:
			return fmt.Errorf("input %s: %w", r.Name, err)
		}
	}
	return fmt.Errorf("input %s: %w after %d tries", r.Name, errChanged, handoutTries)
}

// recheck hashes e's file again (once for every run that found it
// changed at the same time) and stamps it anew if it still matches: it
// answers errChanged then (copy again), else why it must go.
func (c *Cache) recheck(ctx context.Context, digest string, e *entry) error {
	_, err, _ := c.group.Do("recheck:"+digest, func() (any, error) {
		s, err := recheck(ctx, filepath.Join(c.dir, digest), digest)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		e.stamp = s
		c.rechecked++
		c.mu.Unlock()
		return nil, nil
	})
	if err != nil {
		return err
	}
	return errChanged
}

// acquire takes one reference on r's entry for tenant, fetching it first
// unless tenant holds a grant on it, and returns the entry, its file and
// its stamp. The runs of one tenant that need the same input from the same
// URI at the same time share one fetch; other tenants' fetches are their
// own (and a failure of one run's URI is never another run's).
func (c *Cache) acquire(ctx context.Context, tenant string, r contracts.InputRef) (*entry, string, stamp, error) {
	path := filepath.Join(c.dir, r.SHA256)
	key := fmt.Sprintf("%q %s %q %q", tenant, r.SHA256, r.URI, r.Name)
	for {
		c.mu.Lock()
		if e := c.granted(r.SHA256, tenant); e != nil {
			e.refs++
			c.touchLocked(e, tenant)
			s := e.stamp
			c.mu.Unlock()
			return e, path, s, nil
		}
		c.mu.Unlock()
		_, err, _ := c.group.Do(key, func() (any, error) { return nil, c.load(ctx, tenant, r, path) })
		if err != nil {
			return nil, "", stamp{}, err
		}
		// Loaded: take the reference (unless evicted meanwhile: load again).
	}
}

// release gives back a reference acquire took.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
}

// evict removes e, digest's entry, unless another entry replaced it
// meanwhile.
func (c *Cache) evict(digest string, e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[digest] != e {
		return
	}
	_ = os.Remove(filepath.Join(c.dir, digest))
	c.size -= e.size
	c.grants -= len(e.grants) // the bytes are no longer trusted, for anyone
	delete(c.entries, digest)
	c.evicted++
}

// load fetches r to path for tenant, checking its digest as it streams,
// and grants tenant the content: it enters the file in the cache, or, if
// another tenant's fetch entered the same bytes already, keeps that one
// copy and drops its own. It evicts what no run uses to stay within the
// bounds.
func (c *Cache) load(ctx context.Context, tenant string, r contracts.InputRef, path string) error {
	c.mu.Lock()
	e := c.granted(r.SHA256, tenant)
	c.mu.Unlock()
	if e != nil {
		return nil // granted by a load that just ended
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
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[r.SHA256]
	if !ok {
		// Renamed under the lock: a load of the same bytes by another
		// tenant finds the entry, never a file renamed over this one.
		if err := os.Rename(tmp.Name(), path); err != nil {
			return fmt.Errorf("inputs: %w", err)
		}
		info, err := os.Lstat(path)
		if err != nil {
			return fmt.Errorf("inputs: %w", err)
		}
		e = &entry{size: n, stamp: stampOf(info), grants: map[string]uint64{}}
		c.entries[r.SHA256] = e
		c.size += n
	}
	c.grantLocked(e, tenant)
	c.evictLocked(r.SHA256, tenant)
	return nil
}
