package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/devstack"
	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// sluiceBinary is the real sluice command, built once for the end-to-end
// tests.
var sluiceBinary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the binary's tests skip: nothing to build
	}
	dir, err := os.MkdirTemp("", "sluice-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBinary = filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", sluiceBinary, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build sluice: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// stack is an all-in-one Sluice running in the test process, its gateway
// on a loopback port.
type stack struct {
	t    *testing.T
	base string
}

// startStack runs a stack with the given workers and settings until the
// test ends.
func startStack(t *testing.T, workers int, extra map[string]string) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("the sluice binary: not run with -short (make test runs it)")
	}
	env := map[string]string{
		"SLUICE_DATA_DIR":                    t.TempDir(),
		"SLUICE_HTTP_ADDR":                   "127.0.0.1:0",
		"SLUICE_RETRY_INTERVAL":              "100ms",
		"SLUICE_RETRY_BACKOFF":               "50ms",
		"SLUICE_HEARTBEAT_INTERVAL":          "100ms",
		"SLUICE_STALE_THRESHOLD":             "2s",
		"SLUICE_SHUTDOWN_TIMEOUT":            "2s",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
		"SLUICE_WORKER_EXEC_ALLOW":           "sh",
		"SLUICE_LOG_LEVEL":                   "warn",
		"SLUICE_RATE_LIMIT_TENANT":           "0",
		"SLUICE_RATE_LIMIT_TENANT_READ":      "0",
		"SLUICE_RATE_LIMIT_IP":               "0",
	}
	for k, v := range extra {
		env[k] = v
	}
	// The first tenant is the operator: readiness waits on the workers,
	// which only the operator's /v1/stats shows.
	if first, _, _ := strings.Cut(env["SLUICE_API_TOKENS"], ":"); first != "" && env["SLUICE_OPERATOR_TENANTS"] == "" {
		env["SLUICE_OPERATOR_TENANTS"] = first
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := zerolog.Nop()
	if os.Getenv("SLUICE_TEST_LOGS") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := devstack.Start(ctx, devstack.Options{Environ: env, Workers: workers, NATSListen: "127.0.0.1:0", HTTPListener: ln, Log: log})
	if err != nil {
		cancel()
		_ = ln.Close()
		require.NoError(t, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(devstack.ShutdownGrace):
			t.Error("stack did not stop")
		}
	})
	st := &stack{t: t, base: "http://" + s.HTTPAddr}
	first, _, _ := strings.Cut(env["SLUICE_API_TOKENS"], ",")
	_, token, _ := strings.Cut(first, ":")
	require.Eventually(t, func() bool {
		var stats contracts.Stats
		return st.getJSON("/v1/stats", token, &stats) == http.StatusOK && len(stats.Workers) == max(workers, 0)
	}, 20*time.Second, 20*time.Millisecond, "stack never became ready")
	return st
}

// getJSON reads path into v through the Go client and returns the
// status (0 when the gateway could not be reached).
func (s *stack) getJSON(path, token string, v any) int {
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	c, err := client.New(s.base, opts...)
	require.NoError(s.t, err)
	body, code, err := c.Raw(context.Background(), http.MethodGet, path, nil)
	if err != nil {
		return 0
	}
	if code == http.StatusOK {
		require.NoError(s.t, json.Unmarshal(body, v))
	}
	return code
}

// job reads a job straight from the API.
func (s *stack) job(id string) contracts.Job {
	s.t.Helper()
	var j contracts.Job
	require.Equal(s.t, http.StatusOK, s.getJSON("/v1/jobs/"+id, "", &j))
	return j
}

// waitState waits until job id is in state.
func (s *stack) waitState(id string, state contracts.JobState) {
	s.t.Helper()
	require.Eventually(s.t, func() bool { return s.job(id).State == state }, 30*time.Second, 10*time.Millisecond, "job %s never %s", id, state)
}

// hasEventRoutes reports whether the gateway serves event streams.
func (s *stack) hasEventRoutes() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/v1/events", nil)
	require.NoError(s.t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// result is what one run of the binary did.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the sluice binary against the stack with env on top of
// SLUICE_URL and returns what it did.
func (s *stack) cli(env map[string]string, stdin string, args ...string) result {
	s.t.Helper()
	cmd := s.command(env, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(s.t, ok, "run sluice %v: %v", args, err)
		code = ee.ExitCode()
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// run is cli without extra environment or stdin.
func (s *stack) run(args ...string) result {
	s.t.Helper()
	return s.cli(nil, "", args...)
}

// command is the binary as an *exec.Cmd, not started, killed (by pid) when
// the test ends if it is still running.
func (s *stack) command(env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.Command(sluiceBinary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.t.TempDir(), "SLUICE_URL=" + s.base}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	s.t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return cmd
}

// background starts the binary and returns its stdout as a channel of
// lines and a function that waits for its exit and returns its result.
func (s *stack) background(args ...string) (*exec.Cmd, <-chan string, func() result) {
	s.t.Helper()
	cmd := s.command(nil, args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(s.t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(s.t, cmd.Start())
	lines := make(chan string, 1024)
	var all bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer close(lines)
		data := make([]byte, 4096)
		var partial string
		for {
			n, err := stdout.Read(data)
			all.Write(data[:n])
			partial += string(data[:n])
			for {
				line, rest, ok := strings.Cut(partial, "\n")
				if !ok {
					break
				}
				lines <- line
				partial = rest
			}
			if err != nil {
				if err != io.EOF {
					s.t.Logf("read stdout: %v", err)
				}
				return
			}
		}
	}()
	wait := func() result {
		<-copied
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(s.t, err)
		}
		return result{code: code, stdout: all.String(), stderr: errb.String()}
	}
	return cmd, lines, wait
}

// waitLine reads lines until one contains want and returns it.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "output ended before a line with %q", want)
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("no line with %q", want)
		}
	}
}
