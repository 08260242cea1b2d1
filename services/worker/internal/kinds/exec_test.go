package kinds_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
)

const testGrace = 300 * time.Millisecond

func execPayload(t *testing.T, argv []string, extra map[string]any) json.RawMessage {
	t.Helper()
	p := map[string]any{"argv": argv}
	for k, v := range extra {
		p[k] = v
	}
	data, err := json.Marshal(p)
	require.NoError(t, err)
	return data
}

func decodeExecResult(t *testing.T, data json.RawMessage) kinds.ExecResult {
	t.Helper()
	var r kinds.ExecResult
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// processGone reports whether pid no longer runs (a zombie waiting for its
// reaper counts as gone: it runs nothing).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return os.IsNotExist(err)
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestExecCapturesOutput(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}, Env: []string{"WHO"}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t,
		[]string{"/bin/sh", "-c", `echo "hello $WHO"; echo oops >&2`},
		map[string]any{"env": map[string]string{"WHO": "sluice"}}))
	require.NoError(t, err)
	r := decodeExecResult(t, out)
	require.Zero(t, r.ExitCode)
	require.Equal(t, "hello sluice\n", r.Stdout)
	require.Equal(t, "oops\n", r.Stderr)
	require.GreaterOrEqual(t, r.DurationMS, int64(0))
}

func TestExecResolvesNamesThroughPath(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"echo"}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t, []string{"echo", "a", "b"}, nil))
	require.NoError(t, err)
	require.Equal(t, "a b\n", decodeExecResult(t, out).Stdout)
}

func TestExecMinimalEnvironment(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"env"}, Env: []string{"FOO"}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t, []string{"env"},
		map[string]any{"env": map[string]string{"FOO": "bar"}}))
	require.NoError(t, err)
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(decodeExecResult(t, out).Stdout), "\n") {
		name, _, _ := strings.Cut(line, "=")
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{"FOO", "HOME", "PATH"}, names)
}

func TestExecWorkingDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"pwd"}, Dirs: []string{dir}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t, []string{"pwd"}, map[string]any{"dir": dir}))
	require.NoError(t, err)
	require.Equal(t, dir+"\n", decodeExecResult(t, out).Stdout)
}

// TestExecLeastPrivilege: a job sets only the variables the operator
// lists, works only in its scratch directory or under a listed root (after
// symlinks), and runs in its scratch directory by default; anything else
// fails input: without running.
func TestExecLeastPrivilege(t *testing.T) {
	t.Parallel()
	root, scratch, outside := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(scratch, "sub"), 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(scratch, "escape")))
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}, Env: []string{"WHO"}, Dirs: []string{root}}, testGrace, nil)
	run := func(extra map[string]any) (kinds.ExecResult, error) {
		out, err := e.RunIn(context.Background(), kinds.Run{Scratch: func() (string, error) { return scratch, nil },
			Payload: execPayload(t, []string{"/bin/sh", "-c", `pwd; echo "$SLUICE_SCRATCH_DIR"`}, extra)})
		if err != nil {
			return kinds.ExecResult{}, err
		}
		return decodeExecResult(t, out), nil
	}
	r, err := run(nil)
	require.NoError(t, err)
	require.Equal(t, scratch+"\n"+scratch+"\n", r.Stdout, "runs in its scratch directory, and is told it")
	r, err = run(map[string]any{"dir": "sub"})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(scratch, "sub")+"\n", r.Stdout[:len(filepath.Join(scratch, "sub"))+1])
	_, err = run(map[string]any{"dir": root, "env": map[string]string{"WHO": "x"}})
	require.NoError(t, err)
	for name, extra := range map[string]map[string]any{
		"env not listed":        {"env": map[string]string{"BASH_ENV": "/tmp/x"}},
		"PATH not listed":       {"env": map[string]string{"PATH": "/tmp"}},
		"dir outside":           {"dir": outside},
		"dir through a symlink": {"dir": "escape"},
		"dir up and out":        {"dir": "../"},
		"dir missing":           {"dir": "nope"},
	} {
		_, err := run(extra)
		require.Error(t, err, name)
		require.Equal(t, contracts.ClassInput, contracts.ClassOf(contracts.Classify(err)), "%s: %v", name, err)
	}
}

func TestExecOutputIsBounded(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t,
		[]string{"/bin/sh", "-c", `head -c 200000 /dev/zero | tr '\0' a; printf END`}, nil))
	require.NoError(t, err)
	r := decodeExecResult(t, out)
	require.Len(t, r.Stdout, kinds.OutputLimit)
	require.True(t, strings.HasSuffix(r.Stdout, "aaaEND"), "the tail is kept")
}

func TestExecNotAllowedIsInputError(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	for _, argv := range [][]string{{"sh", "-c", "true"}, {"/bin/echo", "hi"}, {"rm", "-rf", "/nonexistent"}} {
		out, err := e.Run(context.Background(), execPayload(t, argv, nil))
		require.Nil(t, out)
		var ce *contracts.ClassedError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, contracts.ClassInput, ce.Class)
		require.Equal(t, "input: exec: program "+strconv.Quote(argv[0])+" is not allowed", contracts.Classify(err))
	}
	_, err := kinds.NewExecer(kinds.ExecPolicy{}, testGrace, nil).Run(context.Background(), execPayload(t, []string{"/bin/sh"}, nil))
	require.ErrorContains(t, err, "is not allowed", "an empty allow list refuses everything")
}

func TestExecNonZeroExit(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	out, err := e.Run(context.Background(), execPayload(t, []string{"/bin/sh", "-c", "echo partial; exit 3"}, nil))
	require.Error(t, err)
	require.Equal(t, "handler: exit status 3", contracts.Classify(err))
	r := decodeExecResult(t, out)
	require.Equal(t, 3, r.ExitCode)
	require.Equal(t, "partial\n", r.Stdout)
}

func TestExecMissingProgram(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"no-such-program-sluice"}}, testGrace, nil)
	_, err := e.Run(context.Background(), execPayload(t, []string{"no-such-program-sluice"}, nil))
	require.Error(t, err)
	require.Equal(t, contracts.ClassHandler, contracts.ClassOf(contracts.Classify(err)))
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	start := time.Now()
	out, err := e.Run(context.Background(), execPayload(t,
		[]string{"/bin/sh", "-c", `sleep 30 & echo $! > "$1"; wait`, "sh", pidfile},
		map[string]any{"timeout": "300ms"}))
	require.Less(t, time.Since(start), 10*time.Second)
	var ce *contracts.ClassedError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, contracts.ClassTimeout, ce.Class)
	require.Equal(t, "timeout: exec: timed out after 300ms", contracts.Classify(err))
	require.NotNil(t, out, "the result is attached to a timeout")

	data, rerr := os.ReadFile(pidfile)
	require.NoError(t, rerr)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, perr)
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 20*time.Millisecond,
		"grandchild %d survived the timeout", pid)
}

func TestExecEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "pid")
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// The shell and its children ignore SIGTERM; only SIGKILL stops them.
		_, err := e.Run(ctx, execPayload(t, []string{"/bin/sh", "-c",
			`trap '' TERM; sleep 30 & echo $! > "$1"; while :; do sleep 0.05; done`, "sh", pidfile}, nil))
		done <- err
	}()
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidfile)
		return err == nil && len(strings.TrimSpace(string(data))) > 0
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not stop after SIGKILL")
	}
	data, err := os.ReadFile(pidfile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 20*time.Millisecond)
}

func TestExecBadPayloadIsInputError(t *testing.T) {
	t.Parallel()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	_, err := e.Run(context.Background(), json.RawMessage(`{"argv":["/bin/sh"],"timeout":"forever"}`))
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(contracts.Classify(err)))
}

func TestKnown(t *testing.T) {
	t.Parallel()
	require.True(t, kinds.Known("sleep"))
	require.True(t, kinds.Known("exec"))
	require.False(t, kinds.Known("shell"))
	require.Equal(t, []string{"exec", "sleep"}, kinds.Names())
}
