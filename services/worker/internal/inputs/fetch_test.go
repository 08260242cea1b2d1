package inputs

import (
	"context"
	"io"
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

// fetchWithin runs one fetch to io.Discard with a byte limit no input
// reaches, failing the test if it has not ended by a generous deadline
// (a fetch that hangs, or reads an endless file, never ends).
func fetchWithin(t *testing.T, f Fetchers, uri string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(context.Background(), uri, io.Discard, 1<<62)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("fetch of %s did not end", uri)
		return nil
	}
}

// requireRefused checks err is an input error naming the rule that
// refused the fetch.
func requireRefused(t *testing.T, err error, rule string) string {
	t.Helper()
	require.Error(t, err)
	msg := contracts.Classify(err)
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(msg), msg)
	require.Contains(t, msg, "refused")
	require.Contains(t, msg, rule)
	return msg
}

// TestFetchRefusesTheWorkersNetworkByDefault: with nothing allowed, a
// tenant's input cannot reach the worker's loopback, private ranges or
// the cloud metadata address (by address or by a name resolving to
// one), and no file of the worker's is read, FIFO and endless devices
// included.
func TestFetchRefusesTheWorkersNetworkByDefault(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("internal secret"))
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	f := Fetchers{Timeout: 5 * time.Second}

	for uri, rule := range map[string]string{
		srv.URL + "/x":                             "address 127.0.0.1 is loopback",
		"http://localhost:" + port + "/x":          "host localhost resolves to",
		"http://10.0.0.1/x":                        "address 10.0.0.1 is private",
		"http://192.168.1.1/x":                     "address 192.168.1.1 is private",
		"http://100.64.0.1/x":                      "address 100.64.0.1 is shared",
		"http://169.254.169.254/latest/meta-data/": "address 169.254.169.254 is the cloud metadata address",
		"http://169.254.1.1/x":                     "link-local",
		"http://[::1]:" + port + "/x":              "address ::1 is loopback",
		"http://[::ffff:127.0.0.1]:" + port + "/x": "address 127.0.0.1 is loopback",
		"http://[fd00::1]/x":                       "private",
		"http://0.0.0.0:" + port + "/x":            "unspecified",
		"http://224.0.0.1/x":                       "multicast",
	} {
		msg := requireRefused(t, fetchWithin(t, f, uri), rule)
		require.Contains(t, msg, "SLUICE_WORKER_FETCH_ALLOW", "the error says how to allow it")
	}
	require.Zero(t, hits.Load(), "nothing reached the worker's own network")

	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	file := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(file, []byte("data"), 0o644))
	for _, path := range []string{"/etc/passwd", "/proc/self/environ", "/no/such/file", fifo, "/dev/zero", file} {
		requireRefused(t, fetchWithin(t, f, "file://"+path), "file roots of SLUICE_WORKER_FETCH_ALLOW")
	}
}

// fetchError is what a fetch of uri answers, as a job would show it.
func fetchError(t *testing.T, f Fetchers, uri string) string {
	t.Helper()
	err := fetchWithin(t, f, uri)
	require.Error(t, err, uri)
	return contracts.Classify(err)
}

// TestCheckRefusesAsTheFetchDoes: Check gives every refusal a fetch gives
// on the URI as written, word for word, and lets through what a fetch
// would try. A host name is not resolved: a name that resolves to
// loopback passes Check and is refused by the fetch when it connects.
func TestCheckRefusesAsTheFetchDoes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "in"), []byte("x"), 0o644))
	f := allowing(t, 5*time.Second, root, "127.0.0.1", "10.1.0.0/16", "minio.internal")
	for _, uri := range []string{
		"http://127.0.0.2/x", "http://[::1]/x", "http://10.2.0.1/x", "http://192.168.1.1/x",
		"http://169.254.169.254/x", "http://[fd00::1]/x", "http://[64:ff9b::a00:1]/x", "http://0.0.0.0/x",
		"file:///etc/passwd", "file://" + root, "file://" + root + "/../in", "file://x" + root + "/in",
		"gopher://a/b", "http://a b/", "%zz",
	} {
		err := f.Check(uri)
		require.Error(t, err, uri)
		require.Equal(t, fetchError(t, f, uri), contracts.Classify(err), uri)
	}
	for _, uri := range []string{
		"http://127.0.0.1/x", "https://10.1.2.3/x", "http://minio.internal/x",
		"https://inputs.example/x", "http://localhost/x", "file://" + root + "/in", "file://localhost" + root + "/in",
	} {
		require.NoError(t, f.Check(uri), uri)
	}
}
