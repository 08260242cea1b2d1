package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's top directory, seen from this package.
const root = "../../../.."

// read returns a file of the repository as text.
func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(b)
}

// markdownFiles lists the documents the tests check: README.md,
// CHANGELOG.md, every file of docs/ and the compose README.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "deploy/compose/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// prose is markdown without its code: fenced blocks and inline code spans.
func prose(md string) string {
	return inlineCode.ReplaceAllString(fence.ReplaceAllString(md, ""), "")
}

// anchors returns the anchors GitHub gives the headings of md: lower case,
// punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		text := strings.ReplaceAll(m[1], "`", "")
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		md   string
		want string
	}{
		{"# Sluice", "sluice"},
		{"## `make swarm`: many workers at once", "make-swarm-many-workers-at-once"},
		{"### Scratch directories and the `exec` kind on least privilege", "scratch-directories-and-the-exec-kind-on-least-privilege"},
		{"## Two numbers: `attempt` and `claim`", "two-numbers-attempt-and-claim"},
		{"## Fan-out: one job over many items, a few at a time", "fan-out-one-job-over-many-items-a-few-at-a-time"},
		{"## A\n## A", "a-1"},
	} {
		require.True(t, anchors(tc.md)[tc.want], "%q should give #%s, gave %v", tc.md, tc.want, anchors(tc.md))
	}
}
