package kinds_test

import (
	"context"
	"os"
	"path/filepath"
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

func TestWallsSmoke(t *testing.T) {
	t.Parallel()
	sb, enf := walled(t)
	scratch := t.TempDir()
	e := kinds.NewExecer(kinds.ExecPolicy{Programs: []string{"/bin/sh"}}, testGrace, nil)
	out, err := e.RunIn(context.Background(), kinds.Run{
		Payload:   execPayload(t, []string{"/bin/sh", "-c", `id; pwd; echo $HOME; ls /proc | head -50 | tr '\n' ' '; cat /proc/$PPID/environ | tr '\0' '\n' | head -3; echo hi > x; ls -la`}, nil),
		Scratch:   func() (string, error) { return scratch, nil },
		Name:      "smoke",
		Resources: contracts.Resources{Memory: 256 << 20},
		Enforcer:  enf,
		Sandbox:   sb,
	})
	res := decodeExecResult(t, out)
	t.Logf("isolation %s (%s)\nerr %v\nstdout:\n%s\nstderr:\n%s", sb.Isolation(), sb.Reason(), err, res.Stdout, res.Stderr)
	_, statErr := os.Stat(filepath.Join(scratch, "x"))
	require.NoError(t, statErr)
}
