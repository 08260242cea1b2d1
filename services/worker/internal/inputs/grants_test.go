package inputs

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The tenants of these tests.
const (
	acme   = "acme"
	globex = "globex"
)

// servePaths starts a server on 127.0.0.1 that answers each path in
// bodies with its body (404 for any other) and counts every request.
func servePaths(t *testing.T, bodies map[string]string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestACachedInputIsServedOnlyToATenantThatFetchedIt: acme fetches a
// file; globex names the same digest with a loopback URI the rules refuse
// and gets the fetch's own refusal, with an allowed URI that cannot be
// reached or serves other bytes it gets that failure: acme's bytes never
// reach globex's run. Named with an allowed URI that serves the same
// bytes, globex fetches them itself and then holds a grant on the one
// cached copy.
func TestACachedInputIsServedOnlyToATenantThatFetchedIt(t *testing.T) {
	t.Parallel()
	const genome = "ACGT reference genome of acme\n"
	srv, hits := servePaths(t, map[string]string{"/genome.fa": genome, "/mirror/genome.fa": genome, "/other": "other bytes\n"})
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	f := allowing(t, 5*time.Second, "127.0.0.1") // not ::1
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 1<<20, f)
	require.NoError(t, err)
	ctx := context.Background()
	pin := func(uri string) []contracts.InputRef {
		return []contracts.InputRef{{Name: "h", URI: uri, SHA256: digest(genome)}}
	}

	paths, err := c.Acquire(ctx, acme, pin(srv.URL+"/genome.fa"), t.TempDir())
	require.NoError(t, err)
	data, err := os.ReadFile(paths["h"])
	require.NoError(t, err)
	require.Equal(t, genome, string(data))
	require.Equal(t, int64(1), hits.Load())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/genome.fa"
	require.NoError(t, ln.Close())
	refused := "http://[::1]:" + port + "/genome.fa"
	for _, tc := range []struct {
		uri, want string
		class     contracts.ErrorClass
	}{
		{refused, fetchError(t, f, refused), contracts.ClassInput},
		{closed, "handler: input h: fetch of " + closed + ": could not be fetched", contracts.ClassHandler}, // retried
		{srv.URL + "/other", "input: input h: " + srv.URL + "/other does not match its pinned sha256 " + digest(genome), contracts.ClassInput},
		{srv.URL + "/gone", "input: fetch of " + srv.URL + "/gone: 404 Not Found", contracts.ClassInput},
	} {
		dir := t.TempDir()
		_, err := c.Acquire(ctx, globex, pin(tc.uri), dir)
		require.Error(t, err, tc.uri)
		msg := contracts.Classify(err)
		require.Equal(t, tc.want, msg, tc.uri)
		require.Equal(t, tc.class, contracts.ClassOf(msg), tc.uri)
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, left, "%s: nothing reached globex's run", tc.uri)
	}
	require.Equal(t, "input: fetch of "+refused+" refused: address ::1 is loopback (allow it with SLUICE_WORKER_FETCH_ALLOW)",
		fetchError(t, f, refused), "the rule is named, never a digest")
	require.Equal(t, int64(3), hits.Load(), "the refused URI reached nothing; the two allowed ones were fetched")

	// An allowed URI serving the same bytes: globex's own fetch, one copy.
	paths, err = c.Acquire(ctx, globex, pin(srv.URL+"/mirror/genome.fa"), t.TempDir())
	require.NoError(t, err)
	data, err = os.ReadFile(paths["h"])
	require.NoError(t, err)
	require.Equal(t, genome, string(data))
	require.Equal(t, int64(4), hits.Load(), "globex fetched it itself")
	st := c.Stats()
	require.Equal(t, 1, st.Entries, "one copy of the bytes")
	require.Equal(t, 2, st.Grants, "two tenants may read it")
	files, err := os.ReadDir(c.dir)
	require.NoError(t, err)
	require.Len(t, files, 1, "the second fetch's file was dropped")

	// Both now hold a grant: a cached input for either, from any allowed URI.
	for _, tenant := range []string{acme, globex} {
		_, err := c.Acquire(ctx, tenant, pin(srv.URL+"/genome.fa"), t.TempDir())
		require.NoError(t, err)
	}
	require.Equal(t, int64(4), hits.Load(), "served from the cache")
}

// TestARefusedURIIsRefusedDespiteACacheHit: a tenant that holds a grant
// on a digest still cannot name it with a URI the rules refuse (an
// address of the worker's own network, a file outside the roots or not
// a regular file, another scheme): the run gets the fetch's own error,
// and no copy.
func TestARefusedURIIsRefusedDespiteACacheHit(t *testing.T) {
	t.Parallel()
	const body = "pinned bytes\n"
	root := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "in"), []byte(body), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "in"), []byte(body), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "in"), filepath.Join(root, "escape")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	f := allowing(t, 5*time.Second, root)
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 1<<20, f)
	require.NoError(t, err)
	ctx := context.Background()
	pin := func(uri string) []contracts.InputRef {
		return []contracts.InputRef{{Name: "h", URI: uri, SHA256: digest(body)}}
	}
	_, err = c.Acquire(ctx, acme, pin("file://"+root+"/in"), t.TempDir())
	require.NoError(t, err)

	for _, uri := range []string{
		"http://127.0.0.1:1/in",
		"http://10.0.0.1/in",
		"http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:127.0.0.1]/in",
		"file://" + outside + "/in",
		"file://" + root + "/escape",
		"file://" + root + "/fifo",
		"file://" + root + "/dir",
		"file://" + root + "/missing",
		"file://host.example" + root + "/in",
		"ftp://inputs.example/in",
		"http://[::1/in",
	} {
		dir := t.TempDir()
		_, err := c.Acquire(ctx, acme, pin(uri), dir)
		require.Error(t, err, uri)
		require.Equal(t, fetchError(t, f, uri), contracts.Classify(err), "%s: the fetch's own refusal", uri)
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, left, uri)
	}
	require.Equal(t, 1, c.Stats().Fetches, "nothing refused was fetched")
}

// TestGrantsAndEntriesStayWithinTheirBounds: the cache holds at most its
// bytes and its grants; past the grant bound the least recently used
// grant goes (a tenant whose grant went fetches again), and an entry goes
// with its last grant; an entry evicted for room takes its grants along.
func TestGrantsAndEntriesStayWithinTheirBounds(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{}
	for _, p := range []string{"/a", "/b", "/c"} {
		bodies[p] = "content of " + p // 13 bytes each
	}
	srv, hits := servePaths(t, bodies)
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 30, allowing(t, 0, "127.0.0.1"))
	require.NoError(t, err)
	c.maxGrants = 3
	ctx := context.Background()
	ref := func(p string) []contracts.InputRef {
		return []contracts.InputRef{{Name: "h", URI: srv.URL + p, SHA256: digest(bodies[p])}}
	}
	within := func() {
		t.Helper()
		st := c.Stats()
		require.LessOrEqual(t, st.Bytes, int64(30))
		require.LessOrEqual(t, st.Grants, 3)
		files, err := os.ReadDir(c.dir)
		require.NoError(t, err)
		require.Len(t, files, st.Entries, "one file per entry, no leftovers")
		var grants int
		c.mu.Lock()
		for _, e := range c.entries {
			require.NotEmpty(t, e.grants, "no entry without a grant")
			grants += len(e.grants)
		}
		c.mu.Unlock()
		require.Equal(t, st.Grants, grants)
	}

	// Five tenants, one input: three grants at most, the oldest go.
	for i := range 5 {
		_, err := c.Acquire(ctx, fmt.Sprint("tenant-", i), ref("/a"), t.TempDir())
		require.NoError(t, err)
		within()
	}
	require.Equal(t, int64(5), hits.Load(), "each tenant its own fetch")
	st := c.Stats()
	require.Equal(t, 1, st.Entries)
	require.Equal(t, 3, st.Grants)
	_, err = c.Acquire(ctx, "tenant-4", ref("/a"), t.TempDir())
	require.NoError(t, err)
	require.Equal(t, int64(5), hits.Load(), "a recent grant is kept")
	_, err = c.Acquire(ctx, "tenant-0", ref("/a"), t.TempDir())
	require.NoError(t, err)
	require.Equal(t, int64(6), hits.Load(), "the oldest grant went: fetched again")
	within()

	// Bytes: a second and a third entry; the least recently used goes
	// for room, with its grants.
	_, err = c.Acquire(ctx, acme, ref("/b"), t.TempDir())
	require.NoError(t, err)
	within()
	_, err = c.Acquire(ctx, acme, ref("/c"), t.TempDir())
	require.NoError(t, err)
	within()
	st = c.Stats()
	require.Equal(t, 2, st.Entries)
	require.Equal(t, int64(26), st.Bytes)
	c.mu.Lock()
	_, aKept := c.entries[digest(bodies["/a"])]
	c.mu.Unlock()
	require.False(t, aKept, "the least recently used entry went, its grants with it")
	before := hits.Load()
	_, err = c.Acquire(ctx, "tenant-4", ref("/a"), t.TempDir())
	require.NoError(t, err)
	require.Equal(t, before+1, hits.Load(), "its grants went with it: fetched again")
	within()
}

// TestGrantsOfAnEntryInUseAreKept: a grant on an entry a run is copying
// is not revoked to make room for others.
func TestGrantsOfAnEntryInUseAreKept(t *testing.T) {
	t.Parallel()
	s := setupHandout(t, "held\n")
	s.cache.maxGrants = 1
	ctx := context.Background()
	_, err := s.cache.Acquire(ctx, acme, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	s.cache.mu.Lock()
	e := s.cache.entries[s.ref.SHA256]
	e.refs++ // a run of acme is copying it
	s.cache.mu.Unlock()
	_, err = s.cache.Acquire(ctx, globex, []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	s.cache.mu.Lock()
	require.Len(t, e.grants, 2, "over the bound while the run holds it")
	e.refs--
	s.cache.mu.Unlock()
	_, err = s.cache.Acquire(ctx, "initech", []contracts.InputRef{s.ref}, t.TempDir())
	require.NoError(t, err)
	require.Equal(t, 1, s.cache.Stats().Grants, "back within the bound once released")
	require.Equal(t, 3, s.cache.Stats().Fetches)
}
