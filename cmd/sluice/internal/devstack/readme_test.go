package devstack

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/docs"
)

// TestReadmeCurlExamples runs every curl example of README.md, in order,
// against a whole stack on 127.0.0.1, as a user would paste them: each must
// be answered 2xx. An id written with an ellipsis ("0193…") stands for the
// job the latest answer that named one returned. (An example sent without
// Content-Type: application/json was answered 415.)
func TestReadmeCurlExamples(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../../../../README.md")
	require.NoError(t, err)
	curls, err := docs.Curls(string(md))
	require.NoError(t, err)
	require.NotEmpty(t, curls, "README.md has no curl example")

	b := setup(t, Options{}, nil)
	base, err := url.Parse(b.base)
	require.NoError(t, err)
	lastID := ""
	for _, c := range curls {
		target := c.URL
		if !strings.Contains(target, "://") {
			target = "http://" + target
		}
		u, err := url.Parse(target)
		require.NoError(t, err, "README.md:%d: %s", c.Line, c.Source)
		require.Contains(t, []string{"localhost:8080", "127.0.0.1:8080"}, u.Host, "README.md:%d: examples talk to the gateway make run starts", c.Line)
		u.Scheme, u.Host = base.Scheme, base.Host
		segments := strings.Split(u.Path, "/")
		for i, s := range segments {
			if strings.Contains(s, "…") {
				require.NotEmpty(t, lastID, "README.md:%d: %s names a job before any answer gave one", c.Line, c.Source)
				segments[i] = lastID
			}
		}
		u.Path, u.RawPath = strings.Join(segments, "/"), ""

		var body io.Reader
		if c.HasBody {
			body = strings.NewReader(c.Body)
		}
		req, err := http.NewRequestWithContext(t.Context(), c.Method, u.String(), body)
		require.NoError(t, err)
		req.Header = c.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "README.md:%d: %s", c.Line, c.Source)
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.True(t, resp.StatusCode >= 200 && resp.StatusCode < 300,
			"README.md:%d answered %d %s:\n%s", c.Line, resp.StatusCode, answer, c.Source)

		var named struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(answer, &named) == nil && named.ID != "" {
			lastID = named.ID
		}
	}
}
