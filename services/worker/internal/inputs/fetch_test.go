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
