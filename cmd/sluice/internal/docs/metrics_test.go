package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	// registered matches a metric's name where Go code defines it: the
	// Name of prometheus options or the first argument of NewDesc.
	registered = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(sluice_[a-z0-9_]+)"`)
	// documented matches a metric's row in the operations table.
	documented = regexp.MustCompile("(?m)^\\| `(sluice_[a-z0-9_]+)` \\|")
)

// registeredMetrics finds every sluice_* metric the non-test Go code of
// services/, pkg/ and cmd/ defines.
func registeredMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{"services", "pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range registered.FindAllStringSubmatch(string(b), -1) {
				names = append(names, m[1])
			}
			return nil
		})
		require.NoError(t, err)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestMetricsDocumented fails when a service registers a metric that
// docs/operations.md does not describe, or the document describes one no
// service registers.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	code := registeredMetrics(t)
	require.GreaterOrEqual(t, len(code), 30, "the scan found too few metrics: %v", code)
	var doc []string
	for _, m := range documented.FindAllStringSubmatch(read(t, "docs/operations.md"), -1) {
		doc = append(doc, m[1])
	}
	slices.Sort(doc)
	var missing, unknown []string
	for _, n := range code {
		if !slices.Contains(doc, n) {
			missing = append(missing, n)
		}
	}
	for _, n := range doc {
		if !slices.Contains(code, n) {
			unknown = append(unknown, n)
		}
	}
	require.Empty(t, missing, "metrics registered by a service but missing from the table of docs/operations.md")
	require.Empty(t, unknown, "metrics in docs/operations.md that no service registers")
	require.Len(t, doc, len(slices.Compact(slices.Clone(doc))), "a metric is listed twice in docs/operations.md")
}
