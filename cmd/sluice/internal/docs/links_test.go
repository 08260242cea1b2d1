package docs

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestLinks checks every relative link of the documents: the file it
// names exists, and the heading its #anchor names is in that file.
func TestLinks(t *testing.T) {
	t.Parallel()
	for _, file := range markdownFiles(t) {
		md := read(t, file)
		for _, m := range link.FindAllStringSubmatch(prose(md), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			rel, anchor, _ := strings.Cut(target, "#")
			dest := file
			if rel != "" {
				dest = path.Join(path.Dir(file), rel)
				_, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
				require.NoError(t, err, "%s links to %s, which does not exist", file, target)
			}
			if anchor == "" {
				continue
			}
			require.True(t, strings.HasSuffix(dest, ".md"), "%s links to an anchor of %s, which is not markdown", file, target)
			require.True(t, anchors(read(t, dest))[anchor], "%s links to %s: %s has no heading #%s", file, target, dest, anchor)
		}
	}
}
