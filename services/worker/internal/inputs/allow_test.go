package inputs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// allowing is a Fetchers allowing entries (SLUICE_WORKER_FETCH_ALLOW).
func allowing(t *testing.T, timeout time.Duration, entries ...string) Fetchers {
	t.Helper()
	a, err := ParseAllow(entries)
	require.NoError(t, err)
	return Fetchers{Timeout: timeout, Allow: a}
}

// TestParseAllow: entries are file roots, addresses, CIDRs or host names;
// anything else is refused with the entry named.
func TestParseAllow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := ParseAllow([]string{" 127.0.0.1", "10.1.0.0/16", "Minio.Internal.", dir, "file://" + dir, "fd00::/8", ""})
	require.NoError(t, err)
	require.True(t, a.hostAllowed("minio.internal"))
	require.Len(t, a.nets, 3)
	require.Equal(t, []string{dir, dir}, a.files.Dirs())
	for _, bad := range []string{"10.0.0.0/33", "not a host", "relative/dir", "/no/such/dir", "file://rel", "ex*mple.com"} {
		_, err := ParseAllow([]string{bad})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), strings.TrimPrefix(bad, "file://"), bad)
	}
	var none Allow
	require.Nil(t, Fetchers{Allow: none}.transport().Proxy, "no proxy from the environment")
}

// TestCheckAddr: the worker's own ranges are refused unless an entry
// covers them; public addresses pass.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	a, err := ParseAllow([]string{"10.1.0.0/16", "127.0.0.2"})
	require.NoError(t, err)
	for addr, want := range map[string]string{
		"8.8.8.8": "", "2606:4700::1111": "", "10.1.2.3": "", "127.0.0.2": "",
		"10.2.0.1": "private", "172.16.5.4": "private", "127.0.0.1": "loopback", "::1": "loopback",
		"169.254.169.254": "metadata", "fe80::1": "link-local", "100.100.0.1": "shared", "0.0.0.0": "unspecified",
		"::": "unspecified", "239.1.1.1": "multicast", "255.255.255.255": "reserved", "::ffff:10.2.0.1": "private",
		"64:ff9b::7f00:1": "loopback", "fd00:ec2::254": "metadata",
	} {
		ip, err := netip.ParseAddr(addr)
		require.NoError(t, err)
		err = a.checkAddr(ip, "")
		if want == "" {
			require.NoError(t, err, addr)
			continue
		}
		require.ErrorContains(t, err, want, addr)
	}
}

// TestFetchAllowed: what the allow list names is fetched; a redirect from
// an allowed host to the worker's network is refused, and so is a name
// resolving to loopback when only another name is allowed.
func TestFetchAllowed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-private":
			http.Redirect(w, r, "http://10.0.0.1/x", http.StatusFound)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/to-loopback":
			http.Redirect(w, r, "http://127.0.0.1:"+r.URL.Query().Get("port")+"/x", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			_, _ = w.Write([]byte("content of " + r.URL.Path))
		}
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	ctx := context.Background()

	byAddr := allowing(t, 5*time.Second, "127.0.0.1")
	var out strings.Builder
	_, err := byAddr.Fetch(ctx, srv.URL+"/x", &out, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "content of /x", out.String())
	requireRefused(t, fetchWithin(t, byAddr, srv.URL+"/to-private"), "redirect to http://10.0.0.1/x: address 10.0.0.1 is private")
	requireRefused(t, fetchWithin(t, byAddr, srv.URL+"/to-metadata"), "the cloud metadata address")
	requireRefused(t, fetchWithin(t, byAddr, srv.URL+"/loop"), "more than 10 redirects")

	// Only the name localhost is allowed: the address it resolves to is
	// not allowed under another name, nor as an address.
	byName := allowing(t, 5*time.Second, "localhost")
	_, err = byName.Fetch(ctx, "http://localhost:"+port+"/x", io.Discard, 1<<20)
	require.NoError(t, err)
	requireRefused(t, fetchWithin(t, byName, "http://localhost:"+port+"/to-loopback?port="+port), "redirect to http://127.0.0.1:"+port+"/x: address 127.0.0.1 is loopback")
	requireRefused(t, fetchWithin(t, allowing(t, 5*time.Second, "127.0.0.2"), "http://localhost:"+port+"/x"),
		"host localhost resolves to")
}

// TestFetchErrorsTellNothing: a closed port gets the one generic message
// (no dial error), retried; a wrong digest does not tell the digest of
// what was fetched.
func TestFetchErrorsTellNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/x"
	require.NoError(t, ln.Close())
	f := allowing(t, 5*time.Second, "127.0.0.1")
	err = fetchWithin(t, f, closed)
	require.EqualError(t, err, fmt.Sprintf("fetch of %s: could not be fetched", closed))
	require.NotEqual(t, contracts.ClassInput, contracts.ClassOf(contracts.Classify(err)), "the network may mend: retried")

	const secret = "root:x:0:0:root:/root:/bin/bash\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(secret)) }))
	defer srv.Close()
	c, err := Open(filepath.Join(t.TempDir(), "cache"), 1<<20, f)
	require.NoError(t, err)
	_, err = c.Acquire(context.Background(), acme, []contracts.InputRef{{Name: "p", URI: srv.URL + "/passwd", SHA256: strings.Repeat("0", 64)}}, t.TempDir())
	require.Error(t, err)
	msg := contracts.Classify(err)
	sum := sha256.Sum256([]byte(secret))
	require.NotContains(t, msg, hex.EncodeToString(sum[:]), "the error never hashes what a tenant could not read")
	require.Contains(t, msg, "does not match its pinned sha256")
}

// TestFetchFileRoots: file:// reads only regular files under the allowed
// roots; a FIFO or /dev/zero under an allowed root ends at once with the
// refusal, and an endless /proc file ends with SLUICE_WORKER_FETCH_TIMEOUT.
func TestFetchFileRoots(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "ref"), []byte("reference"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "escape")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	f := allowing(t, 5*time.Second, root, "/dev")

	var out strings.Builder
	_, err := f.Fetch(context.Background(), "file://"+root+"/ref", &out, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "reference", out.String())
	for _, path := range []string{outside + "/secret", root + "/escape", root + "/../" + filepath.Base(outside) + "/secret",
		root + "/missing", root + "/fifo", "/dev/zero", "/dev/urandom", "/etc/passwd"} {
		requireRefused(t, fetchWithin(t, f, "file://"+path), "file roots of SLUICE_WORKER_FETCH_ALLOW")
	}
	requireRefused(t, fetchWithin(t, f, "file://evil.example"+root+"/ref"), "names no host")

	if _, err := os.Stat("/proc/self/pagemap"); err == nil {
		err := fetchWithin(t, allowing(t, 100*time.Millisecond, "/proc"), "file:///proc/self/pagemap")
		require.EqualError(t, err, "fetch of file:///proc/self/pagemap: could not be fetched")
	}
}
