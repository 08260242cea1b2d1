package sandbox

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// started launches /bin/sleep 300 through box, as a run's program.
func started(t *testing.T, box *Box) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l, err := box.Launch(cmd)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	require.NoError(t, l.Begin(limit.Target{}, nil, false))
	return cmd
}

// waited waits for cmd, at most within.
func waited(cmd *exec.Cmd, within time.Duration) (*exec.ExitError, bool) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		errors.As(err, &exit)
		return exit, true
	case <-time.After(within):
		return nil, false
	}
}

// TestWardenKillsARunWhoseLeasePassed: the worker's renewals stop (as
// they do when it is frozen): the warden kills the run's program when the
// lease passes, on its own, and says so.
func TestWardenKillsARunWhoseLeasePassed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var expired []string
	sb := New(Options{OnExpired: func(run string) {
		mu.Lock()
		defer mu.Unlock()
		expired = append(expired, run)
	}})
	box, err := sb.Open("lease", Dirs{})
	require.NoError(t, err)
	box.Renew(time.Hour)
	cmd := started(t, box)
	box.Renew(300 * time.Millisecond) // the last renewal
	exit, ok := waited(cmd, 20*time.Second)
	require.True(t, ok, "the program outlived its lease")
	require.NotNil(t, exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	box.Close()
	require.NoError(t, sb.Close())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"lease"}, expired)
}

// TestWardenKillsEveryRunWhenItsWorkerGoes: when the worker's end of the
// warden's socket closes (the worker died: the kernel closes it), the
// warden kills every run it watches, leases or not, and exits.
func TestWardenKillsEveryRunWhenItsWorkerGoes(t *testing.T) {
	t.Parallel()
	sb := New(Options{})
	var cmds []*exec.Cmd
	for _, name := range []string{"a", "b"} {
		box, err := sb.Open(name, Dirs{})
		require.NoError(t, err)
		defer box.Close()
		cmds = append(cmds, started(t, box))
	}
	require.NoError(t, sb.Close())
	for _, cmd := range cmds {
		exit, ok := waited(cmd, 20*time.Second)
		require.True(t, ok, "a run outlived its worker's warden")
		require.NotNil(t, exit)
	}
}

// TestLaunchSaysWhyTheProgramDidNotStart: a directory the run cannot
// enter fails the launch with the launcher's reason, and nothing runs.
func TestLaunchSaysWhyTheProgramDidNotStart(t *testing.T) {
	t.Parallel()
	sb := New(Options{})
	defer func() { require.NoError(t, sb.Close()) }()
	box, err := sb.Open("nodir", Dirs{})
	require.NoError(t, err)
	defer box.Close()
	cmd := exec.Command("/bin/sleep", "300")
	cmd.Dir = "/nonexistent/dir"
	l, err := box.Launch(cmd)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	err = l.Begin(limit.Target{}, nil, false)
	var le *LaunchError
	require.ErrorAs(t, err, &le)
	require.Contains(t, le.Reason, "dir: chdir /nonexistent/dir")
	exit, ok := waited(cmd, 20*time.Second)
	require.True(t, ok)
	require.Equal(t, enterFailCode, exit.ExitCode())
}

// TestPathsAsTheRunSeesThem: in a namespace the scratch and input
// directories are seen at their binds, shared directories at their own
// paths, anything else where it is.
func TestPathsAsTheRunSeesThem(t *testing.T) {
	t.Parallel()
	b := &Box{binds: append([]bind{{From: "/data/scratch/w/j-1", To: runScratch}, {From: "/data/scratch/w/j-1.inputs-9", To: runInputs}},
		sharedBinds([]string{"/tmp/shared", "/srv/shared"})...)}
	require.Equal(t, runScratch, b.Path("/data/scratch/w/j-1"))
	require.Equal(t, runScratch+"/sub/file", b.Path("/data/scratch/w/j-1/sub/file"))
	require.Equal(t, runInputs+"/ref", b.Path("/data/scratch/w/j-1.inputs-9/ref"))
	require.Equal(t, "/data/scratch/w/j-10", b.Path("/data/scratch/w/j-10"))
	require.Equal(t, "/tmp/shared/x", b.Path("/tmp/shared/x"))
	require.Equal(t, "/etc/hosts", b.Path("/etc/hosts"))
	require.Len(t, sharedBinds([]string{"/tmp/shared", "/srv/shared"}), 1, "only under a private directory")
	var nilBox *Box
	require.Equal(t, "/x", nilBox.Path("/x"))
	require.Zero(t, nilBox.UID())
}

// TestANewWardenLearnsEveryRun: a warden that died (killed) is started
// again at the next renewal and told of every open run: the lease of a
// run it learned of that way still ends the run.
func TestANewWardenLearnsEveryRun(t *testing.T) {
	t.Parallel()
	sb := New(Options{})
	defer func() { require.NoError(t, sb.Close()) }()
	box, err := sb.Open("again", Dirs{})
	require.NoError(t, err)
	defer box.Close()
	box.Renew(time.Hour)
	cmd := started(t, box)
	sb.mu.Lock()
	old := sb.w
	sb.mu.Unlock()
	require.NoError(t, old.cmd.Process.Kill())
	require.Eventually(t, func() bool { return !old.alive() }, 10*time.Second, time.Millisecond)
	box.Renew(300 * time.Millisecond)
	sb.mu.Lock()
	require.NotSame(t, old, sb.w, "a new warden")
	sb.mu.Unlock()
	_, ok := waited(cmd, 20*time.Second)
	require.True(t, ok, "the program outlived its lease under the new warden")
}
