package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
// so each can be required from outside. Alone (GOWORK=off, go.mod and
// go.sum read-only) every package it builds or tests must resolve, and
// each must come from the same module version as in the workspace. With
// the same sources at the same versions, the workspace's own build of
// every package (make test compiles them all, tests included) is the
// module's build alone, without compiling every dependency a second time
// outside the race cache. A module whose go.mod asks for an older version
// than the workspace selects fails here: run go work sync.
// (TestEmbeddedWorkerExample does compile one module alone, as a user would.)
func TestModulesBuildAlone(t *testing.T) {
	t.Parallel()
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
		t.Run(u.DiskPath, func(t *testing.T) {
			t.Parallel()
			alone := goList(t, dir, true)
			inWork := goList(t, dir, false)
			require.NotEmpty(t, alone)
			require.Equal(t, inWork, alone, "GOWORK=off, %s builds other packages or versions than in the workspace", u.DiskPath)
		})
	}
}

// goList lists every package the module in dir builds or tests (with
// -deps -test), each with the directory of the module it comes from (a
// version in the module cache, or one of ours in this tree), sorted; with
// alone, as a user's build would see it (GOWORK=off, -mod=readonly).
func goList(t *testing.T, dir string, alone bool) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test",
		"-f", "{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Dir}}{{end}}{{end}}", "./...")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if alone {
		cmd.Env = append(cmd.Env, "GOWORK=off", "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=readonly")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list in %s (alone: %v):\n%s", dir, alone, stderr.String())
	var pkgs []string
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			pkgs = append(pkgs, line)
		}
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
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
	// Built as make test builds its test binaries (race detector, the
	// same -gcflags and -trimpath), so every package it shares with them
	// comes from the build cache instead of being compiled a second time
	// without the detector (on a cold cache that was minutes).
	goAlone(t, filepath.Join(repoRoot, "examples", "embedded-worker"),
		"build", "-race", "-gcflags=modernc.org/...=-race=false", "-gcflags=modernc.org/sqlite=-race", "-trimpath", "-o", bin, ".")

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
