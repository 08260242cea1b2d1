package admission

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluicehq/sluice/pkg/confine"
)

// digestCache keeps the SHA-256 of files the gateway hashed, by real path
// (symbolic links resolved) with the stamp the file had then: a pin of a
// file whose stamp is the same (device, inode, size, mtime and ctime)
// costs a stat instead of a read. The ctime is part of the stamp because
// the mtime alone can be set back (touch -d, cp -p, rsync -t) after the
// bytes changed, and the ctime cannot be. It holds at most a bounded
// number of entries, the least recently used dropped first; a path holds
// one entry, the stamp of its latest hash. A nil *digestCache keeps
// nothing.
//
// The cache is shared by every tenant, and that grants nothing: the file
// is the operator's, under SLUICE_PIN_ROOTS, where every tenant may pin
// every file, so the digest a tenant is given from the cache is the one
// it would have computed by reading the file itself; a digest is looked
// up only by the path the tenant named and after the same checks of the
// roots, the file type and the stamp as a read. What a hit can tell is
// timing: a pin answered in a stat rather than a read says the file was
// hashed since its last change, by any tenant (docs/security.md). A
// tenant that fills the cache with entries of its own can make others
// read their files again; that read counts in their own shares, as any
// read.
type digestCache struct {
	entries *lru.Cache[string, stampedDigest]
}

// stampedDigest is a file's digest and the stamp it had when hashed.
type stampedDigest struct {
	stamp  confine.Stamp
	digest string
}

// newDigestCache returns a cache of at most n entries (nil for n <= 0: no
// cache).
func newDigestCache(n int) *digestCache {
	if n <= 0 {
		return nil
	}
	c, err := lru.New[string, stampedDigest](n)
	if err != nil {
		return nil // only for n <= 0
	}
	return &digestCache{entries: c}
}

// get is the digest kept for the file at path if its stamp is still s.
func (c *digestCache) get(path string, s confine.Stamp) (string, bool) {
	if c == nil {
		return "", false
	}
	e, ok := c.entries.Get(path)
	if !ok || e.stamp != s {
		return "", false
	}
	return e.digest, true
}

// put keeps digest for the file at path with stamp s, in place of what
// the path held.
func (c *digestCache) put(path string, s confine.Stamp, digest string) {
	if c == nil {
		return
	}
	c.entries.Add(path, stampedDigest{stamp: s, digest: digest})
}

// len is the number of entries kept.
func (c *digestCache) len() int {
	if c == nil {
		return 0
	}
	return c.entries.Len()
}
