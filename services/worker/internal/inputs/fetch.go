package inputs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Fetcher copies the content at uri to w, at most limit bytes, and says
// how many it copied. An error that cannot get better by trying again (a
// missing file, a refusal by the server or by the allow list, too large)
// is a *contracts.ClassedError of class input.
//
// Check applies the rules a fetch of uri applies before it reads
// anything, and refuses uri with the very error Fetch would give; the
// cache asks it before it hands out a cached input, so that content is
// never served for a URI a fetch would refuse.
type Fetcher interface {
	Check(uri string) error
	Fetch(ctx context.Context, uri string, w io.Writer, limit int64) (int64, error)
}

// Fetchers are the file:// and http(s):// fetchers, within what Allow
// allows. Its errors name the rule that refused a fetch and never carry
// a raw network or file system error: a tenant learns nothing of the
// worker's network or files from them.
type Fetchers struct {
	// Timeout bounds one fetch, a file's read included.
	Timeout time.Duration
	// Allow is what may be fetched (SLUICE_WORKER_FETCH_ALLOW); the zero
	// value allows public http(s) addresses only.
	Allow Allow
}

// maxRedirects bounds the redirects one fetch follows.
const maxRedirects = 10

// dialTimeout bounds one connection attempt (the fetch's own timeout
// bounds them all).
const dialTimeout = 30 * time.Second

// inputError is an error a retry cannot mend.
func inputError(format string, args ...any) error {
	return &contracts.ClassedError{Class: contracts.ClassInput, Err: fmt.Errorf(format, args...)}
}

// Check refuses uri as a fetch of it would, without connecting anywhere
// or reading anything: a URI that is not one, a scheme not fetched, an
// address of the worker's own network the allow list does not name, a
// file:// naming a host, or a file that is not a regular file under the
// file roots (opened and closed, as the fetch opens it). A host name is
// not resolved: the fetch checks what a name resolves to when it
// connects, and Check makes no connection (see docs/inputs.md).
func (f Fetchers) Check(uri string) error {
	u, err := f.check(uri)
	if err != nil {
		return err
	}
	if u.Scheme == "file" {
		file, err := f.Allow.files.Open(u.Path)
		if err != nil {
			return fileRefused(uri) // Open has no other answer than ErrRefused
		}
		_ = file.Close()
	}
	return nil
}

// check applies the rules on the URI as written that every fetch applies
// first, and returns it parsed.
func (f Fetchers) check(uri string) (*url.URL, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, inputError("%s is not a URI", uri)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, inputError("fetch of %s refused: a file:// input names no host", uri)
		}
	case "http", "https":
		if err := f.Allow.checkHost(u.Hostname()); err != nil {
			return nil, inputError("fetch of %s refused: %v", uri, err)
		}
		if _, err := http.NewRequest(http.MethodGet, uri, nil); err != nil {
			return nil, inputError("%s is not a URL that can be fetched", uri)
		}
	default:
		return nil, inputError("%s: scheme %q is not fetched here", uri, u.Scheme)
	}
	return u, nil
}

// fileRefused is the one refusal of a file:// input the file roots do not
// allow, whatever the reason.
func fileRefused(uri string) error {
	return inputError("fetch of %s refused: only regular files under the file roots of %s are read, "+
		"and this one is not one of them or does not exist", uri, AllowVariable)
}

// Fetch fetches uri by its scheme, after check.
func (f Fetchers) Fetch(ctx context.Context, uri string, w io.Writer, limit int64) (int64, error) {
	u, err := f.check(uri)
	if err != nil {
		return 0, err
	}
	parent := ctx
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	if u.Scheme == "file" {
		return f.fetchFile(ctx, parent, uri, u, w, limit)
	}
	return f.fetchHTTP(ctx, parent, uri, w, limit)
}

// fetchFile copies a file under the allowed file roots.
func (f Fetchers) fetchFile(ctx, parent context.Context, uri string, u *url.URL, w io.Writer, limit int64) (int64, error) {
	n, err := f.Allow.files.Copy(ctx, u.Path, w, limit)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, confine.ErrRefused):
		return 0, fileRefused(uri)
	case errors.Is(err, confine.ErrTooLarge):
		return n, inputError("%s is larger than the cache (%d bytes)", uri, limit)
	}
	return n, f.unfetched(parent, uri)
}

// fetchHTTP copies the body of a GET (its URI checked), through a client
// that refuses the worker's own network on every redirect and at every
// connection.
func (f Fetchers) fetchHTTP(ctx, parent context.Context, uri string, w io.Writer, limit int64) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return 0, inputError("%s is not a URL that can be fetched", uri)
	}
	transport := f.transport()
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, CheckRedirect: f.checkRedirect}
	resp, err := client.Do(req)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return 0, inputError("fetch of %s refused: %v", uri, r)
		}
		return 0, f.unfetched(parent, uri)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
			return 0, inputError("fetch of %s: %s", uri, resp.Status)
		}
		return 0, fmt.Errorf("fetch of %s: %s", uri, resp.Status) // may mend: try again later
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return n, f.unfetched(parent, uri)
	}
	if n > limit {
		return n, inputError("%s is larger than the cache (%d bytes)", uri, limit)
	}
	return n, nil
}

// unfetched is a fetch that failed on the way (no connection, a reset, the
// timeout): one message whatever the cause, so that a tenant cannot tell
// a closed port from a filtered one; tried again later. A fetch cut short
// because the run was cancelled says so.
func (f Fetchers) unfetched(parent context.Context, uri string) error {
	if err := parent.Err(); err != nil {
		return fmt.Errorf("fetch of %s: %w", uri, err)
	}
	return fmt.Errorf("fetch of %s: could not be fetched", uri)
}

// transport is a fresh HTTP transport for one fetch: no proxy from the
// environment, and each connection checked on the address it goes to.
func (f Fetchers) transport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           f.dial,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          1,
	}
}

// dial connects to addr, refusing at connect time (on the resolved
// address, whatever the name said) the worker's own network unless the
// allow list names the host or the address.
func (f Fetchers) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &refusal{reason: fmt.Sprintf("%q is not host:port", addr), fixed: true}
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if !f.Allow.hostAllowed(host) {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &refusal{reason: fmt.Sprintf("host %s resolves to something that is not an address", host), fixed: true}
			}
			return f.Allow.checkAddr(ap.Addr(), host)
		}
	}
	return d.DialContext(ctx, network, addr)
}

// checkRedirect follows at most maxRedirects redirects, to http(s) only,
// refusing one to an address of the worker's own network (names are
// checked when the connection is made).
func (f Fetchers) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return &refusal{reason: fmt.Sprintf("more than %d redirects", maxRedirects), fixed: true}
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return &refusal{reason: fmt.Sprintf("redirect to scheme %q", req.URL.Scheme), fixed: true}
	}
	if err := f.Allow.checkHost(req.URL.Hostname()); err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return &refusal{reason: "redirect to " + req.URL.Redacted() + ": " + r.reason, fixed: r.fixed}
		}
		return err
	}
	return nil
}
