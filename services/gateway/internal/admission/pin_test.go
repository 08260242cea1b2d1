package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
)

// pinRig is a Pinner over a temporary root whose opens and reads are
// counted, on a fake clock whose time moves only by the pacing's waits.
type pinRig struct {
	root  string
	p     *Pinner
	clock *clocktest.Clock
	// opens and reads count the files opened and the bytes read.
	opens, reads atomic.Int64
	// slept is the sum of the pacing's waits.
	mu    sync.Mutex
	slept time.Duration
	// hold, when set for a file name, blocks the first read of that file
	// until the channel is closed; reading is signalled on held.
	hold map[string]chan struct{}
	held chan string
}

// newPinRig builds a rig with lim (MaxBytes 1 GiB unless set) on a clock
// standing at clocktest.Epoch, years after the files' last change.
func newPinRig(t *testing.T, lim PinLimits) *pinRig {
	t.Helper()
	root := t.TempDir()
	roots, err := confine.New([]string{root})
	require.NoError(t, err)
	if lim.MaxBytes == 0 {
		lim.MaxBytes = 1 << 30
	}
	r := &pinRig{root: root, clock: clocktest.New(), hold: map[string]chan struct{}{}, held: make(chan string, 16)}
	r.p = NewPinner(roots, lim, r.clock.Now)
	r.p.open = func(path string) (pinFile, string, error) {
		f, real, err := roots.OpenResolved(path)
		if err != nil {
			return nil, "", err
		}
		r.opens.Add(1)
		r.mu.Lock()
		gate := r.hold[filepath.Base(real)]
		r.mu.Unlock()
		return &countedFile{f: f, reads: &r.reads, gate: gate, held: r.held, name: filepath.Base(real)}, real, nil
	}
	r.p.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		r.slept += d
		r.mu.Unlock()
		r.clock.Advance(d)
		return nil
	}
	return r
}

// countedFile counts the bytes read from f; with a gate, its first read
// says so on held and waits for the gate to close.
type countedFile struct {
	f     *os.File
	reads *atomic.Int64
	gate  chan struct{}
	held  chan string
	name  string
	once  sync.Once
}

func (c *countedFile) Read(b []byte) (int, error) {
	if c.gate != nil {
		c.once.Do(func() { c.held <- c.name })
		<-c.gate
	}
	n, err := c.f.Read(b)
	c.reads.Add(int64(n))
	return n, err
}

func (c *countedFile) Stat() (fs.FileInfo, error) { return c.f.Stat() }
func (c *countedFile) Close() error               { return c.f.Close() }

// write puts data in the root's file name and returns its path.
func (r *pinRig) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(r.root, name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// pin pins the file at path for tenant: its digest, or the refusal.
func (r *pinRig) pin(ctx context.Context, tenant, path string) (string, *Outcome) {
	in := []contracts.InputRef{{Name: "ref", URI: "file://" + path, SHA256: contracts.PinDigest}}
	out, refused := r.p.pin(ctx, tenant, in)
	if refused != nil {
		return "", refused
	}
	return out[0].SHA256, nil
}

// mustPin pins and requires a digest.
func (r *pinRig) mustPin(t *testing.T, tenant, path string) string {
	t.Helper()
	sum, refused := r.pin(context.Background(), tenant, path)
	require.Nil(t, refused)
	return sum
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// TestPinReusesDigestOfUnchangedFile: a second pin of a file that has not
// changed (by any tenant, through any path that resolves to it) opens and
// stats it, and reads nothing.
func TestPinReusesDigestOfUnchangedFile(t *testing.T) {
	t.Parallel()
	r := newPinRig(t, PinLimits{CacheEntries: 10})
	data := []byte("reference data, version 1\n")
	path := r.write(t, "ref.txt", data)
	require.NoError(t, os.Symlink(path, filepath.Join(r.root, "link")))

	require.Equal(t, sha(data), r.mustPin(t, "acme", path))
	require.Equal(t, int64(len(data)), r.reads.Load(), "the first pin reads the file")
	for _, p := range []string{path, r.root + "/./x/../ref.txt", filepath.Join(r.root, "link")} {
		for _, tenant := range []string{"acme", "globex"} {
			require.Equal(t, sha(data), r.mustPin(t, tenant, p), p)
		}
	}
	require.Equal(t, int64(len(data)), r.reads.Load(), "no pin after the first read a byte")
	require.Equal(t, int64(7), r.opens.Load(), "each pin checked the file")

	// Without a cache every pin reads.
	none := newPinRig(t, PinLimits{})
	path = none.write(t, "ref.txt", data)
	none.mustPin(t, "acme", path)
	none.mustPin(t, "acme", path)
	require.Equal(t, int64(2*len(data)), none.reads.Load())
}

// TestPinRehashesChangedFile: a file whose size, mtime, ctime or inode
// changed is read again and pinned at its new content.
func TestPinRehashesChangedFile(t *testing.T) {
	t.Parallel()
	v1, v2 := []byte("version one\n"), []byte("version two\n") // same size
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string) []byte // returns the new content
	}{
		{"size", func(t *testing.T, path string) []byte {
			data := append(append([]byte{}, v1...), "more\n"...)
			require.NoError(t, os.WriteFile(path, data, 0o644))
			return data
		}},
		{"mtime only", func(t *testing.T, path string) []byte {
			require.NoError(t, os.Chtimes(path, time.Time{}, time.Now().Add(-time.Hour)))
			return v1
		}},
		{"same size, mtime set back (ctime moves)", func(t *testing.T, path string) []byte {
			info, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, v2, 0o644))
			require.NoError(t, os.Chtimes(path, time.Time{}, info.ModTime()))
			after, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, info.ModTime(), after.ModTime(), "the mtime says nothing changed")
			return v2
		}},
		{"inode (renamed over)", func(t *testing.T, path string) []byte {
			tmp := path + ".new"
			require.NoError(t, os.WriteFile(tmp, v2, 0o644))
			info, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Chtimes(tmp, time.Time{}, info.ModTime()))
			require.NoError(t, os.Rename(tmp, path))
			return v2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newPinRig(t, PinLimits{CacheEntries: 10})
			path := r.write(t, "ref.txt", v1)
			require.Equal(t, sha(v1), r.mustPin(t, "acme", path))
			require.Equal(t, sha(v1), r.mustPin(t, "acme", path))
			read := r.reads.Load()
			require.Equal(t, int64(len(v1)), read, "cached after the first pin")

			now := tc.change(t, path)
			require.Equal(t, sha(now), r.mustPin(t, "acme", path))
			require.Equal(t, read+int64(len(now)), r.reads.Load(), "the changed file was read again")
			require.Equal(t, sha(now), r.mustPin(t, "acme", path))
			require.Equal(t, read+int64(len(now)), r.reads.Load(), "and its new digest kept")
		})
	}
}

// TestPinFreshFileNotKept: a file changed within the last seconds (by the
// gateway's clock) is hashed but its digest not kept, since a second
// change in the same tick of the file system's clock would keep its stamp.
func TestPinFreshFileNotKept(t *testing.T) {
	t.Parallel()
	r := newPinRig(t, PinLimits{CacheEntries: 10})
	r.clock.Set(time.Now())
	data := []byte("just written\n")
	path := r.write(t, "ref.txt", data)
	r.mustPin(t, "acme", path)
	r.mustPin(t, "acme", path)
	require.Equal(t, int64(2*len(data)), r.reads.Load(), "read each time while fresh")
	r.clock.Advance(time.Minute)
	r.mustPin(t, "acme", path)
	r.mustPin(t, "acme", path)
	require.Equal(t, int64(3*len(data)), r.reads.Load(), "kept once settled")
}

// TestPinTenantShareBinds: while a tenant has its share of hashes under
// way, its next pin that must read a file is refused with 429
// tenant_pins and a Retry-After, while another tenant's pin goes through
// and a pin of a file whose digest is kept needs no place; past the
// gateway's places every pin that must read is a 503.
func TestPinTenantShareBinds(t *testing.T) {
	t.Parallel()
	r := newPinRig(t, PinLimits{CacheEntries: 10, MaxPins: 2, TenantMaxPins: 1, RetryAfter: 3 * time.Second})
	kept := r.write(t, "kept.txt", []byte("kept\n"))
	r.mustPin(t, "acme", kept)
	slow := r.write(t, "slow.txt", []byte("slow\n"))
	other := r.write(t, "other.txt", []byte("other\n"))
	gate := make(chan struct{})
	r.hold["slow.txt"] = gate

	done := make(chan *Outcome, 1)
	go func() {
		_, refused := r.pin(context.Background(), "acme", slow)
		done <- refused
	}()
	require.Equal(t, "slow.txt", <-r.held, "acme's hash is under way")

	_, refused := r.pin(context.Background(), "acme", other)
	require.NotNil(t, refused, "acme is past its share")
	require.Equal(t, http.StatusTooManyRequests, refused.Status)
	require.Equal(t, contracts.LimitTenantPins, refused.Error.Limit)
	require.Equal(t, contracts.CodeTenantCap, refused.Error.Code)
	require.Equal(t, 3*time.Second, refused.RetryAfter)
	require.Contains(t, refused.Error.Message, "SLUICE_GATEWAY_TENANT_MAX_PINS")

	require.Equal(t, sha([]byte("kept\n")), r.mustPin(t, "acme", kept), "a kept digest needs no place")
	require.Equal(t, sha([]byte("other\n")), r.mustPin(t, "globex", other), "another tenant's pin goes through")

	// globex holds the gateway's second place: a third tenant meets a
	// full gateway.
	gate2 := make(chan struct{})
	third := r.write(t, "third.txt", []byte("third\n"))
	r.mu.Lock()
	r.hold["third.txt"] = gate2
	r.mu.Unlock()
	done2 := make(chan *Outcome, 1)
	go func() {
		_, refused := r.pin(context.Background(), "globex", third)
		done2 <- refused
	}()
	require.Equal(t, "third.txt", <-r.held)
	fourth := r.write(t, "fourth.txt", []byte("fourth\n"))
	_, refused = r.pin(context.Background(), "initech", fourth)
	require.NotNil(t, refused)
	require.Equal(t, http.StatusServiceUnavailable, refused.Status)
	require.Equal(t, 3*time.Second, refused.RetryAfter)
	require.NotContains(t, refused.Error.Message, "acme")
	require.NotContains(t, refused.Error.Message, "globex")

	close(gate)
	close(gate2)
	require.Nil(t, <-done)
	require.Nil(t, <-done2)
	require.Equal(t, sha([]byte("fourth\n")), r.mustPin(t, "initech", fourth), "places are given back")
	require.Equal(t, sha([]byte("other\n")), r.mustPin(t, "acme", other))
}

// TestPinByteRateBinds: one tenant's hashes read no faster than its byte
// rate (the burst at once, then the rest at the rate), another tenant's
// bucket is its own, and a wait cut short by the request is a 503.
func TestPinByteRateBinds(t *testing.T) {
	t.Parallel()
	const rate, burst = 1 << 20, 64 << 10
	r := newPinRig(t, PinLimits{CacheEntries: 10, Rate: rate, Burst: burst})
	big := make([]byte, 4<<20)
	path := r.write(t, "big.bin", big)

	require.Equal(t, sha(big), r.mustPin(t, "acme", path))
	want := time.Duration(float64(len(big)-burst) / rate * float64(time.Second))
	require.InDelta(t, want, r.slept, float64(minPause), "4 MiB at 1 MiB/s after a 64 KiB burst")

	// The kept digest costs nothing: no read, no wait.
	before := r.slept
	require.Equal(t, sha(big), r.mustPin(t, "acme", path))
	require.Equal(t, before, r.slept)

	// Another tenant has a full bucket of its own: a file within the
	// burst is read at once.
	small := r.write(t, "small.bin", make([]byte, burst))
	require.Equal(t, sha(make([]byte, burst)), r.mustPin(t, "globex", small))
	require.Equal(t, before, r.slept)

	// acme's bucket is empty: the same file waits for the rate.
	other := r.write(t, "other.bin", make([]byte, 2*burst))
	r.mustPin(t, "acme", other)
	require.InDelta(t, 2*burst*time.Second/rate, r.slept-before, float64(minPause))

	// A request that ends while its read waits is a 503 that tells the
	// client to try again.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.p.sleep = func(ctx context.Context, _ time.Duration) error {
		cancel() // the client leaves while the read waits
		<-ctx.Done()
		return ctx.Err()
	}
	third := r.write(t, "third.bin", make([]byte, 2*burst))
	_, refused := r.pin(ctx, "acme", third)
	require.NotNil(t, refused)
	require.Equal(t, http.StatusServiceUnavailable, refused.Status)
	require.ErrorIs(t, refused.Cause, context.Canceled)
}

// TestDigestCacheBounded: the cache holds at most its entries, least
// recently used dropped first, one entry per path.
func TestDigestCacheBounded(t *testing.T) {
	t.Parallel()
	c := newDigestCache(2)
	s := confine.Stamp{Dev: 1, Ino: 2, Size: 3, Mtime: 4, Ctime: 5}
	c.put("/a", s, "da")
	c.put("/b", s, "db")
	_, ok := c.get("/a", s)
	require.True(t, ok)
	c.put("/c", s, "dc")
	require.Equal(t, 2, c.len())
	_, ok = c.get("/b", s)
	require.False(t, ok, "the least recently used went")
	changed := s
	changed.Ctime++
	_, ok = c.get("/a", changed)
	require.False(t, ok, "another stamp is another version")
	c.put("/a", changed, "da2")
	got, ok := c.get("/a", changed)
	require.True(t, ok)
	require.Equal(t, "da2", got)
	require.Equal(t, 2, c.len(), "one entry per path")

	var none *digestCache = newDigestCache(0)
	none.put("/a", s, "da")
	_, ok = none.get("/a", s)
	require.False(t, ok)
	require.Zero(t, none.len())
}

var _ io.ReadCloser = (*countedFile)(nil)
