package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Go SDK from outside the workspace: a user's module depends on ours
// by their module paths, with nothing but its own go.mod and go.sum.

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// goAlone runs the go command in dir with the workspace off (GOWORK=off)
// and go.mod and go.sum read-only, as in a user's module, and fails the
// test with its output when it fails.
func goAlone(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=readonly")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "GOWORK=off go %v in %s:\n%s", args, dir, out)
}

// TestModulesBuildAlone: every module of the workspace builds on its own,
// and every package its tests import resolves from its go.mod and go.sum,
// so each can be required from outside. (go vet ./... would check the
// same and type-check the tests again, at several times the cost; make vet
// does that in the workspace.)
func TestModulesBuildAlone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds every module: not run with -short (make test runs it)")
	}
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	require.NoError(t, err)
	var work struct {
		Use []struct{ DiskPath string }
	}
	require.NoError(t, json.Unmarshal(out, &work))
	require.NotEmpty(t, work.Use)
	for _, u := range work.Use {
		dir := filepath.Join(repoRoot, u.DiskPath)
		// One module at a time: each build uses every core.
		t.Run(u.DiskPath, func(t *testing.T) {
			goAlone(t, dir, "build", "-o", os.DevNull, "./...") // checks, writes nothing
			goAlone(t, dir, "list", "-deps", "-test", "./...")
		})
	}
}

// TestEmbeddedWorkerExample: examples/embedded-worker builds with
// GOWORK=off and, run as a user runs it against `sluice dev --workers 0`
// (here a stack without workers on loopback ports), embeds a worker with
// its own kind, submits a job of that kind through pkg/client, waits for
// it and prints its result.
func TestEmbeddedWorkerExample(t *testing.T) {
	t.Parallel()
	s := startStack(t, -1, nil)
	bin := filepath.Join(t.TempDir(), "embedded-worker")
	goAlone(t, filepath.Join(repoRoot, "examples", "embedded-worker"), "build", "-o", bin, ".")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds a hang, not a speed
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"SLUICE_URL=" + s.base,
		"SLUICE_NATS_URL=" + s.nats,
		"SLUICE_DATA_DIR=" + t.TempDir(),
		// The stack's lease timing (startStack), which its workers share.
		"SLUICE_HEARTBEAT_INTERVAL=100ms",
		"SLUICE_STALE_THRESHOLD=2s",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	require.Equal(t, `succeeded {"greeting":"Hello, Ada"}`+"\n", stdout.String(), "stderr:\n%s", stderr.String())
}

// TestEmbeddedWorkerExampleREADME: the Go the example's README shows is
// the example's, line for line, so it compiles whenever the example does.
func TestEmbeddedWorkerExampleREADME(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(repoRoot, "examples", "embedded-worker")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	require.NoError(t, err)
	code := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		code[strings.TrimSpace(line)] = true
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "//") {
				continue
			}
			require.True(t, code[line], "README.md shows a line main.go does not have: %s", line)
		}
	}
}
