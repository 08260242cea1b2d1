package docs

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCurls(t *testing.T) {
	t.Parallel()
	md := "text `curl -d x`\n```sh\n" +
		"# submit\n" +
		"curl -s -XPOST localhost:8080/v1/jobs -H 'Content-Type: application/json' \\\n" +
		"     -d '{\"kind\":\"sleep\"}'\n" +
		"# {\"id\":\"0193…\"}\n" +
		"$ curl -s localhost:8080/v1/jobs/0193… | jq .state   # a comment\n" +
		"$ curl -si -X POST localhost:8080/v1/jobs -H 'Content-Type: application/json' -d '{\"kind\":\"exec\",\n" +
		"    \"payload\":{\"argv\":[\"echo\",\"it'\\''s\"]}}'\n" +
		"curl -s 'localhost:8080/v1/jobs?state=failed&limit=10'\n" +
		"```\n"
	got, err := Curls(md)
	require.NoError(t, err)
	require.Len(t, got, 4)

	require.Equal(t, 4, got[0].Line)
	require.Equal(t, http.MethodPost, got[0].Method)
	require.Equal(t, "localhost:8080/v1/jobs", got[0].URL)
	require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))
	require.Equal(t, `{"kind":"sleep"}`, got[0].Body)

	require.Equal(t, http.MethodGet, got[1].Method)
	require.Equal(t, "localhost:8080/v1/jobs/0193…", got[1].URL)
	require.False(t, got[1].HasBody)

	require.Equal(t, http.MethodPost, got[2].Method)
	require.Equal(t, "{\"kind\":\"exec\",\n    \"payload\":{\"argv\":[\"echo\",\"it's\"]}}", got[2].Body)

	require.Equal(t, "localhost:8080/v1/jobs?state=failed&limit=10", got[3].URL)
}

func TestCurlsRefuse(t *testing.T) {
	t.Parallel()
	for _, md := range []string{
		"```\ncurl --json '{}' localhost:8080/v1/jobs\n```\n",
		"```\ncurl -s -o out localhost:8080/v1/jobs\n```\n",
		"```\ncurl -s -d '{\"kind\":\"x\"}\n```\n",
		"```\ncurl -s -H 'no colon' localhost:8080\n```\n",
	} {
		_, err := Curls(md)
		require.Error(t, err, md)
	}
}

// TestCurlExamplesSendJSON fails when a curl example of the documents
// sends a body without Content-Type: application/json, which the API
// answers 415.
func TestCurlExamplesSendJSON(t *testing.T) {
	t.Parallel()
	n := 0
	for _, file := range markdownFiles(t) {
		curls, err := Curls(read(t, file))
		require.NoError(t, err, file)
		for _, c := range curls {
			n++
			if !c.HasBody {
				continue
			}
			ct := c.Header.Get("Content-Type")
			require.True(t, strings.HasPrefix(ct, "application/json"),
				"%s:%d sends a body without Content-Type: application/json (the API answers 415):\n%s", file, c.Line, c.Source)
		}
	}
	require.Greater(t, n, 10, "too few curl examples found")
}
