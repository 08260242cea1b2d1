package inputs

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
)

// Grants. The cache keeps one copy of each content, under its digest, but
// a digest is something any tenant can name: it may have seen it in a
// shared manifest, or guessed which file another tenant uses. So a cached
// file is handed to a tenant only if that tenant holds a grant on it, and
// a tenant gets a grant only by fetching the content itself, from a URI
// the rules allowed, and finding it matched the digest. Another tenant's
// fetch of the same bytes then costs a fetch but no second copy: its
// bytes are checked and dropped, and the one entry gains a grant.
//
// Grants live with the entries, in memory: an entry evicted (for room or
// because its file no longer matches) takes its grants with it, and the
// cache, emptied at Open, keeps none across a restart either. There are
// at most maxGrants of them beyond those of entries a run is copying:
// past it, the least recently used grant goes (and its entry with its
// last grant), so a stream of new tenant names cannot grow the cache's
// memory.

// MaxGrants bounds the grants a cache holds (a grant is one tenant's
// right to one cached file, a few hundred bytes of memory).
const MaxGrants = 1 << 16

// granted is digest's entry if tenant holds a grant on it, else nil.
// Callers hold mu.
func (c *Cache) granted(digest, tenant string) *entry {
	e, ok := c.entries[digest]
	if !ok {
		return nil
	}
	if _, ok := e.grants[tenant]; !ok {
		return nil
	}
	return e
}

// touchLocked marks e used now by tenant. Callers hold mu.
func (c *Cache) touchLocked(e *entry, tenant string) {
	c.clock++
	e.used = c.clock
	e.grants[tenant] = c.clock
}

// grantLocked gives tenant, whose fetch of e's content matched, a grant
// on it (or renews the one it holds). Callers hold mu.
func (c *Cache) grantLocked(e *entry, tenant string) {
	if _, ok := e.grants[tenant]; !ok {
		c.grants++
	}
	c.touchLocked(e, tenant)
}

// evictLocked keeps the cache within its bounds: past maxGrants it
// revokes the least recently used grants, past maxBytes it removes the
// least recently used entries (with their grants); entries a run is
// copying are left alone, and so is keep's grant for tenant (just
// granted: the run that fetched it takes it next). Callers hold mu.
func (c *Cache) evictLocked(keep, tenant string) {
	if c.grants > c.maxGrants {
		type cand struct {
			digest, tenant string
			used           uint64
		}
		var cs []cand
		for d, e := range c.entries {
			if e.refs > 0 {
				continue
			}
			for t, used := range e.grants {
				if d != keep || t != tenant {
					cs = append(cs, cand{d, t, used})
				}
			}
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].used < cs[j].used })
		for _, x := range cs {
			if c.grants <= c.maxGrants {
				break
			}
			c.revokeLocked(x.digest, x.tenant)
		}
	}
	if c.size <= c.maxBytes {
		return
	}
	type cand struct {
		digest string
		used   uint64
	}
	var cs []cand
	for d, e := range c.entries {
		if e.refs == 0 && d != keep {
			cs = append(cs, cand{d, e.used})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].used < cs[j].used })
	for _, x := range cs {
		if c.size <= c.maxBytes {
			return
		}
		c.removeLocked(x.digest)
	}
}

// revokeLocked takes tenant's grant on digest away; the entry goes with
// its last grant. Callers hold mu.
func (c *Cache) revokeLocked(digest, tenant string) {
	e := c.entries[digest]
	delete(e.grants, tenant)
	c.grants--
	if len(e.grants) == 0 {
		c.removeLocked(digest)
	}
}

// removeLocked removes digest's entry, its file and its grants. A file
// that cannot be removed stays entered (and counted), to be tried again.
// Callers hold mu.
func (c *Cache) removeLocked(digest string) {
	if err := os.Remove(filepath.Join(c.dir, digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	e := c.entries[digest]
	c.size -= e.size
	c.grants -= len(e.grants)
	delete(c.entries, digest)
}
