package inputs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Fetcher copies the content at uri to w, at most limit bytes, and says
// how many it copied. An error that cannot get better by trying again (a
// missing file, a refusal by the server, too large) is a
// *contracts.ClassedError of class input.
type Fetcher interface {
	Fetch(ctx context.Context, uri string, w io.Writer, limit int64) (int64, error)
}

// Fetchers are the file:// and http(s):// fetchers.
type Fetchers struct {
	// Timeout bounds one fetch.
	Timeout time.Duration
	// Client makes the HTTP requests (nil: http.DefaultClient).
	Client *http.Client
}

// inputError is an error a retry cannot mend.
func inputError(format string, args ...any) error {
	return &contracts.ClassedError{Class: contracts.ClassInput, Err: fmt.Errorf(format, args...)}
}

// Fetch fetches uri by its scheme.
func (f Fetchers) Fetch(ctx context.Context, uri string, w io.Writer, limit int64) (int64, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return 0, inputError("%s is not a URI", uri)
	}
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	var body io.ReadCloser
	switch u.Scheme {
	case "file":
		file, err := os.Open(u.Path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
				return 0, inputError("%s: %v", uri, err)
			}
			return 0, err
		}
		body = file
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
		if err != nil {
			return 0, inputError("%s: %v", uri, err)
		}
		client := f.Client
		if client == nil {
			client = http.DefaultClient
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("fetch %s: %w", uri, err) // the network: try again later
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
				return 0, inputError("fetch %s: %s", uri, resp.Status)
			}
			return 0, fmt.Errorf("fetch %s: %s", uri, resp.Status)
		}
		body = resp.Body
	default:
		return 0, inputError("%s: scheme %q is not fetched here", uri, u.Scheme)
	}
	defer body.Close()
	n, err := io.Copy(w, io.LimitReader(body, limit+1))
	if err != nil {
		return n, fmt.Errorf("fetch %s: %w", uri, err)
	}
	if n > limit {
		return n, inputError("%s is larger than the cache (%d bytes)", uri, limit)
	}
	return n, nil
}
