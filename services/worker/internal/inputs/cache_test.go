package inputs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestCacheFetchesOnceChecksAndEvicts: runs that need one digest share
// one fetch, also at the same time; a wrong digest, a missing file or a
// refused fetch is an input error; a server error is not; the cache stays
// within its bound by evicting the least recently used.
func TestCacheFetchesOnceChecksAndEvicts(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/gone":
			http.NotFound(w, r)
		case "/down":
			http.Error(w, "down", http.StatusBadGateway)
		default:
			_, _ = w.Write([]byte("content of " + r.URL.Path))
		}
	}))
	defer srv.Close()
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 30, allowing(t, 0, "127.0.0.1"))
	require.NoError(t, err)
	ctx := context.Background()
	a := contracts.InputRef{Name: "a", URI: srv.URL + "/a", SHA256: digest("content of /a")}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			paths, err := c.Acquire(ctx, acme, []contracts.InputRef{a}, t.TempDir())
			require.NoError(t, err)
			data, err := os.ReadFile(paths["a"])
			require.NoError(t, err)
			require.Equal(t, "content of /a", string(data))
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), hits.Load(), "eight runs, one fetch")
	info, err := os.Stat(filepath.Join(c.dir, a.SHA256))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o444), info.Mode().Perm(), "read-only")

	for name, ref := range map[string]contracts.InputRef{
		"wrong digest": {Name: "w", URI: srv.URL + "/a2", SHA256: digest("something else")},
		"refused":      {Name: "g", URI: srv.URL + "/gone", SHA256: digest("x")},
		"missing file": {Name: "m", URI: "file:///no/such/file", SHA256: digest("x")},
	} {
		_, err := c.Acquire(ctx, acme, []contracts.InputRef{ref}, t.TempDir())
		require.Error(t, err, name)
		require.Equal(t, contracts.ClassInput, contracts.ClassOf(contracts.Classify(err)), "%s: %v", name, err)
	}
	_, err = c.Acquire(ctx, acme, []contracts.InputRef{{Name: "d", URI: srv.URL + "/down", SHA256: digest("x")}}, t.TempDir())
	require.Error(t, err)
	require.NotEqual(t, contracts.ClassInput, contracts.ClassOf(contracts.Classify(err)), "a server error may mend: retried")

	// Free entries go, oldest first, to make room.
	b := contracts.InputRef{Name: "b", URI: srv.URL + "/b", SHA256: digest("content of /b")}
	_, err = c.Acquire(ctx, acme, []contracts.InputRef{b}, t.TempDir())
	require.NoError(t, err)
	d := contracts.InputRef{Name: "c", URI: srv.URL + "/c", SHA256: digest("content of /c")}
	_, err = c.Acquire(ctx, acme, []contracts.InputRef{d}, t.TempDir())
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(c.dir, a.SHA256))
	require.True(t, os.IsNotExist(err), "the free, oldest entry was evicted")
	_, err = os.Stat(filepath.Join(c.dir, b.SHA256))
	require.NoError(t, err, "a newer one stays")
}
