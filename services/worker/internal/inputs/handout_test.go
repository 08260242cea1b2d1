package inputs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// handoutSetup is a cache whose fetches all answer body.
type handoutSetup struct {
	cache *Cache
	ref   contracts.InputRef
	body  string
}

// bodyFetcher answers every fetch with its body (the fetch policy has
// tests of its own).
type bodyFetcher string

func (bodyFetcher) Check(string) error { return nil }

func (f bodyFetcher) Fetch(_ context.Context, _ string, w io.Writer, _ int64) (int64, error) {
	n, err := io.WriteString(w, string(f))
	return int64(n), err
}

func setupHandout(t *testing.T, body string) handoutSetup {
	t.Helper()
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 1<<20, bodyFetcher(body))
	require.NoError(t, err)
	return handoutSetup{cache: c, body: body,
		ref: contracts.InputRef{Name: "h", URI: "https://inputs.example/h.txt", SHA256: digest(body)}}
}

// poison does what a hostile run does to the path it was handed.
func poison(t *testing.T, path, with string) {
	t.Helper()
	require.NoError(t, os.Chmod(path, 0o644))
	require.NoError(t, os.WriteFile(path, []byte(with), 0o644))
}

// TestARunCannotChangeWhatLaterRunsRead: a run that makes its input
// writable and rewrites it changes its own copy only: the next run with
// the same pin reads the pinned bytes, the cached file is untouched, and
// no run is handed a path inside the cache.
func TestARunCannotChangeWhatLaterRunsRead(t *testing.T) {
	t.Parallel()
	s := setupHandout(t, "original\n")
	ctx := context.Background()

	first, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	require.False(t, strings.HasPrefix(first["h"], s.cache.dir+"/"), "a run never gets the cached file: %s", first["h"])
	info, err := os.Stat(first["h"])
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o444), info.Mode().Perm(), "handed out read-only")
	poison(t, first["h"], "poisoned\n")

	second, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	data, err := os.ReadFile(second["h"])
	require.NoError(t, err)
	require.Equal(t, s.body, string(data), "the next run reads the pinned bytes")
	cached, err := os.ReadFile(filepath.Join(s.cache.dir, s.ref.SHA256))
	require.NoError(t, err)
	require.Equal(t, s.body, string(cached), "the cache is untouched")
	st := s.cache.Stats()
	t.Logf("%+v", st) // reflinks or copies, by the filesystem of TMPDIR
	require.Equal(t, Stats{Fetches: 1, Entries: 1, Bytes: int64(len(s.body)), Grants: 1, Reflinks: st.Reflinks, Copies: st.Copies}, st, "a copy (or reflink) leaves the cached file as it was stamped")
	require.Equal(t, 2, st.Reflinks+st.Copies)
}

// TestConcurrentRunsKeepTheirOwnInputs: runs of one pin at the same time
// each get their own copy; what each writes to its copy reaches no other.
func TestConcurrentRunsKeepTheirOwnInputs(t *testing.T) {
	t.Parallel()
	s := setupHandout(t, strings.Repeat("pinned content\n", 1000))
	const runs = 8
	paths := make([]string, runs)
	var got, poisoned sync.WaitGroup
	got.Add(runs)
	poisoned.Add(runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			p, err := s.cache.Acquire(context.Background(), acme, []contracts.InputRef{s.ref}, t.TempDir())
			require.NoError(t, err)
			paths[i] = p["h"]
			data, err := os.ReadFile(paths[i])
			require.NoError(t, err)
			require.Equal(t, s.body, string(data))
			got.Done()
			got.Wait() // every run holds its copy
			poison(t, paths[i], fmt.Sprintf("poisoned by run %d\n", i))
			poisoned.Done()
			poisoned.Wait() // every run wrote to its copy
			data, err = os.ReadFile(paths[i])
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("poisoned by run %d\n", i), string(data), "only its own write")
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, p := range paths {
		require.False(t, seen[p], "two runs share %s", p)
		seen[p] = true
	}
	p, err := s.cache.Acquire(context.Background(), acme, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	data, err := os.ReadFile(p["h"])
	require.NoError(t, err)
	require.Equal(t, s.body, string(data))
	require.Equal(t, 1, s.cache.Stats().Fetches, "one fetch for all")
}

// TestAChangedCacheEntryIsNeverHandedOut: a cached file whose bytes no
// longer match its digest (rewritten in place, same size or not, replaced
// by a link or a FIFO) or that has gone is evicted and fetched again; the
// run gets the pinned bytes.
func TestAChangedCacheEntryIsNeverHandedOut(t *testing.T) {
	t.Parallel()
	for name, tamper := range map[string]func(t *testing.T, path string){
		"same size": func(t *testing.T, path string) { poison(t, path, "ORIGINAL\n") },
		"longer":    func(t *testing.T, path string) { poison(t, path, "original\nand more\n") },
		"removed":   func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) },
		"a link": func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "other")
			require.NoError(t, os.WriteFile(other, []byte("original\n"), 0o644))
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Symlink(other, path))
		},
		"a FIFO": func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, syscall.Mkfifo(path, 0o644))
		},
		"same size, mtime and mode set back": func(t *testing.T, path string) {
			info, err := os.Stat(path)
			require.NoError(t, err)
			poison(t, path, "ORIGINAL\n")
			require.NoError(t, os.Chtimes(path, info.ModTime(), info.ModTime()))
			require.NoError(t, os.Chmod(path, 0o444))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := setupHandout(t, "original\n")
			ctx := context.Background()
			_, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
			require.NoError(t, err)
			tamper(t, filepath.Join(s.cache.dir, s.ref.SHA256))

			p, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
			require.NoError(t, err)
			data, err := os.ReadFile(p["h"])
			require.NoError(t, err)
			require.Equal(t, s.body, string(data))
			st := s.cache.Stats()
			require.Equal(t, 1, st.Evicted, "the changed entry was dropped")
			require.Equal(t, 2, st.Fetches, "and fetched again")
			cached, err := os.ReadFile(filepath.Join(s.cache.dir, s.ref.SHA256))
			require.NoError(t, err)
			require.Equal(t, s.body, string(cached), "the cache holds the pinned bytes again")
		})
	}
}

// TestATouchedCacheEntryIsHashedAgain: a cached file made writable (or
// touched) but still holding the pinned bytes is hashed again, made
// read-only again and handed out without a fetch.
func TestATouchedCacheEntryIsHashedAgain(t *testing.T) {
	t.Parallel()
	s := setupHandout(t, "original\n")
	ctx := context.Background()
	_, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	cached := filepath.Join(s.cache.dir, s.ref.SHA256)
	require.NoError(t, os.Chmod(cached, 0o644))

	for range 2 {
		p, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
		require.NoError(t, err)
		data, err := os.ReadFile(p["h"])
		require.NoError(t, err)
		require.Equal(t, s.body, string(data))
	}
	info, err := os.Stat(cached)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o444), info.Mode().Perm(), "read-only again")
	st := s.cache.Stats()
	require.Equal(t, Stats{Fetches: 1, Rechecked: 1, Entries: 1, Bytes: int64(len(s.body)), Grants: 1, Reflinks: st.Reflinks, Copies: st.Copies}, st, "hashed once, not fetched again")
	require.Equal(t, 3, st.Reflinks+st.Copies)
}

// TestHandOutFailsCleanly: a copy that cannot be made (the run's
// directory is gone) fails the run and leaves the cache as it was; an
// ended context stops a copy.
func TestHandOutFailsCleanly(t *testing.T) {
	t.Parallel()
	s := setupHandout(t, "original\n")
	_, err := s.cache.Acquire(context.Background(), acme, []contracts.InputRef{s.ref}, filepath.Join(t.TempDir(), "gone"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "input h")
	st := s.cache.Stats()
	require.Equal(t, 1, st.Fetches)
	require.Equal(t, 0, st.Evicted, "a failed copy is no reason to drop the entry")
	s.cache.mu.Lock()
	require.Equal(t, 0, s.cache.entries[s.ref.SHA256].refs, "the reference was given back")
	s.cache.mu.Unlock()

	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("run cancelled")
	cancel(stop)
	dir := t.TempDir()
	s.cache.mu.Lock()
	stamped := s.cache.entries[s.ref.SHA256].stamp
	s.cache.mu.Unlock()
	how, err := place(ctx, filepath.Join(s.cache.dir, s.ref.SHA256), filepath.Join(dir, "h"), stamped)
	if how == handoutCopy || err != nil { // a reflink copies nothing: nothing to stop
		require.ErrorIs(t, err, stop)
		require.NoFileExists(t, filepath.Join(dir, "h"), "no half copy is left")
	}
}

// BenchmarkHandOut measures what one run's private copy of an input costs
// on the filesystem of SLUICE_BENCH_DIR (default: the test's temp dir):
// "handout" is what a run pays (stamp check, a reflink or else a kernel
// copy, stamp check), "copy+sha256" what hashing every copy instead would
// cost, "copy" a kernel copy (copy_file_range) alone, "reflink" the
// FICLONE alone (skipped where the filesystem refuses it), "sha256" the
// hash alone.
//
//	go test -run '^$' -bench HandOut -benchtime 20x ./services/worker/internal/inputs
func BenchmarkHandOut(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		root := os.Getenv("SLUICE_BENCH_DIR")
		if root == "" {
			root = b.TempDir()
		}
		dir, err := os.MkdirTemp(root, "bench-")
		require.NoError(b, err)
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		src := filepath.Join(dir, "src")
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		require.NoError(b, os.WriteFile(src, data, 0o444))
		info, err := os.Lstat(src)
		require.NoError(b, err)
		stamped := stampOf(info)
		n := 0
		dst := func() string { n++; return filepath.Join(dir, fmt.Sprintf("dst-%d", n)) }
		label := fmt.Sprintf("%dMiB", size>>20)

		b.Run("handout/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			how := handoutCopy
			for b.Loop() {
				d := dst()
				how, err = place(context.Background(), src, d, stamped)
				require.NoError(b, err)
				require.NoError(b, os.Remove(d))
			}
			b.ReportMetric(float64(how), "reflinked(0)/copied(1)")
		})
		b.Run("copy+sha256/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				d := dst()
				in, err := os.Open(src)
				require.NoError(b, err)
				out, err := os.Create(d)
				require.NoError(b, err)
				h := sha256.New()
				require.NoError(b, copyCtx(context.Background(), io.MultiWriter(out, h), in))
				require.Len(b, h.Sum(nil), sha256.Size)
				require.NoError(b, out.Close())
				require.NoError(b, in.Close())
				require.NoError(b, os.Remove(d))
			}
		})
		b.Run("copy/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				d := dst()
				in, err := os.Open(src)
				require.NoError(b, err)
				out, err := os.Create(d)
				require.NoError(b, err)
				_, err = io.Copy(out, in)
				require.NoError(b, err)
				require.NoError(b, out.Close())
				require.NoError(b, in.Close())
				require.NoError(b, os.Remove(d))
			}
		})
		b.Run("reflink/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			in, err := os.Open(src)
			require.NoError(b, err)
			defer in.Close()
			for b.Loop() {
				d := dst()
				out, err := os.Create(d)
				require.NoError(b, err)
				if err := clone(out, in); err != nil {
					_ = out.Close()
					_ = os.Remove(d)
					b.Skipf("this filesystem refuses a reflink: %v", err)
				}
				require.NoError(b, out.Close())
				require.NoError(b, os.Remove(d))
			}
		})
		b.Run("sha256/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = sha256.Sum256(data)
			}
		})
	}
}
