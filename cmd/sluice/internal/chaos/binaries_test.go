package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The binaries of each store kind are built once for all the profiles of a
// test run (TestChaosShort and TestChaosCluster run the same ones): the
// second profile would otherwise link every binary again.
var (
	binMu   sync.Mutex
	binRoot string                   // made by TestMain, removed after the tests
	binDirs = map[StoreKind]string{} // the directory of each kind built so far
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binRoot = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binaries returns the directory with the binaries of a cluster on store
// kind, building them (see Build) the first time a test asks for it. The
// build is bounded by the test's own timeout, not by a profile's: on a
// fresh clone of a loaded machine compiling every dependency can take
// longer than the five minutes a profile allows itself after its load.
func binaries(ctx context.Context, t *testing.T, kind StoreKind) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if dir, ok := binDirs[kind]; ok {
		return dir
	}
	dir := filepath.Join(binRoot, string(kind))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, Build(ctx, dir, kind))
	binDirs[kind] = dir
	return dir
}
