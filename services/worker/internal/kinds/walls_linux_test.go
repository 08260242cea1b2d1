package kinds_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
)

// walled is a sandbox and an enforcer as a worker builds them, with the
// run uids of sandbox.DefaultUIDs; it skips where the test process may not
// give runs a uid of their own (not root).
func walled(t *testing.T) (*sandbox.Sandbox, *limit.Enforcer) {
	t.Helper()
	r, err := sandbox.ParseRange(sandbox.DefaultUIDs)
	require.NoError(t, err)
	sb := sandbox.New(sandbox.Options{UIDs: r, Pids: 64})
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	if !sb.Isolation().OwnIdentity() {
		t.Skipf("this host gives runs no uid of their own: %s", sb.Reason())
	}
	enf := limit.New(limit.Options{Name: "walls-" + filepath.Base(t.TempDir()), Pids: 64})
	t.Cleanup(func() { _ = enf.Close() })
	return sb, enf
}

// TestAWalledRunSeesOnlyItself: a run with a uid and a namespace of its
// own works in its scratch directory at the fixed path (its HOME too),
// sees only its own processes, cannot read its parent's environment, and
// what it writes lands in the scratch directory the worker keeps.
func TestAWalledRunSeesOnlyItself(t *testing.T) {
	t.Parallel()
	sb, enf := walled(t)
	scratch := t.TempDir()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	script := `id -u; pwd; echo "$HOME"; echo "$SLUICE_SCRATCH_DIR"
ls /proc | grep -c '^[0-9]'
if cat /proc/$PPID/environ >/dev/null 2>&1; then echo "environ read"; else echo "environ refused"; fi
echo hi > written`
	out, err := e.RunIn(context.Background(), kinds.Run{
		Payload: execPayload(t, []string{"/bin/sh", "-c", script}, nil),
		Scratch: func() (string, error) { return scratch, nil },
		Name:    "alone", Resources: contracts.Resources{Memory: 256 << 20},
		Enforcer: enf, Sandbox: sb,
	})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(decodeExecResult(t, out).Stdout), "\n")
	require.Len(t, lines, 6, "%q", lines)
	uid, err := strconv.Atoi(lines[0])
	require.NoError(t, err)
	require.NotZero(t, uid)
	require.NotEqual(t, os.Geteuid(), uid)
	if sb.Isolation() == contracts.IsolationNamespace {
		require.Equal(t, []string{"/tmp/sluice/scratch", "/tmp/sluice/scratch", "/tmp/sluice/scratch"}, lines[1:4])
		procs, err := strconv.Atoi(lines[4])
		require.NoError(t, err)
		require.LessOrEqual(t, procs, 4, "the run sees only its own processes (sh, ls, grep)")
	}
	require.Equal(t, "environ refused", lines[5])
	data, err := os.ReadFile(filepath.Join(scratch, "written"))
	require.NoError(t, err)
	require.Equal(t, "hi\n", string(data))
}

// BenchmarkExecTrue is the cost of one exec run of /bin/true as a worker
// runs it: plain (the worker's uid, no launcher) and walled (a uid and a
// namespace of its own, through the launcher and the warden).
func BenchmarkExecTrue(b *testing.B) {
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/true"}}, testGrace, nil)
	payload, err := json.Marshal(map[string]any{"argv": []string{"/bin/true"}})
	require.NoError(b, err)
	enf := limit.New(limit.Options{Name: "bench-" + filepath.Base(b.TempDir()), Pids: 64})
	b.Cleanup(func() { _ = enf.Close() })
	r, err := sandbox.ParseRange(sandbox.DefaultUIDs)
	require.NoError(b, err)
	sb := sandbox.New(sandbox.Options{UIDs: r, Pids: 64})
	b.Cleanup(func() { _ = sb.Close() })
	for _, tc := range []struct {
		name string
		sb   *sandbox.Sandbox
	}{{"plain", nil}, {"walled-" + string(sb.Isolation()), sb}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				scratch := filepath.Join(b.TempDir(), strconv.Itoa(i))
				require.NoError(b, os.Mkdir(scratch, 0o700))
				_, err := e.RunIn(context.Background(), kinds.Run{
					Payload: payload, Scratch: func() (string, error) { return scratch, nil },
					Name: "bench-" + strconv.Itoa(i), Resources: contracts.Resources{Memory: 256 << 20},
					Enforcer: enf, Sandbox: tc.sb,
				})
				require.NoError(b, err)
			}
		})
	}
}
