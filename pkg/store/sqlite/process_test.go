package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// Environment of a helper process: the test binary run again to play one
// of several processes sharing a database file.
const (
	helperDB   = "SLUICE_SQLITE_HELPER_DB"
	helperMode = "SLUICE_SQLITE_HELPER_MODE"
)

// TestHelperProcess is not a test: it is what helper processes run.
//
//   - mode "admit": admit 60 jobs under Global 50 and print "admitted N";
//   - mode "churn": admit, start and finish jobs until killed, printing
//     "ready" after the first.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperDB)
	if path == "" {
		t.Skip("only runs as a helper process")
	}
	ctx := context.Background()
	s, err := Open(ctx, path)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	switch os.Getenv(helperMode) {
	case "admit":
		admitted := 0
		for range 60 {
			_, adm, err := s.Admit(ctx, storetest.NewJob(fmt.Sprintf("t%d", os.Getpid()%3), time.Now()), store.Caps{Global: 50})
			require.NoError(t, err)
			if adm == store.Admitted {
				admitted++
			}
		}
		fmt.Printf("admitted %d\n", admitted)
	case "churn":
		for i := 0; ; i++ {
			j, _, err := s.Admit(ctx, storetest.NewJob("churn", time.Now()), store.Caps{})
			require.NoError(t, err)
			if i%2 == 0 {
				now := time.Now()
				j, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending},
					store.Change{Now: now, State: contracts.StateRunning, Claim: 1, IncAttempt: true, StartedAt: &now})
				require.NoError(t, err)
				_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: 1},
					store.Change{Now: now, State: contracts.StateSucceeded})
				require.NoError(t, err)
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	default:
		t.Fatalf("unknown helper mode %q", os.Getenv(helperMode))
	}
}

// helper starts this test binary as a helper process in mode.
func helper(t *testing.T, path, mode string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDB+"="+path, helperMode+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, bufio.NewScanner(out)
}

// TestProcessesShareCap runs three processes admitting into one file at
// once: together they admit exactly the cap.
func TestProcessesShareCap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "sluice.db")
	openTest(t, path) // create the schema before the race
	var (
		cmds  []*exec.Cmd
		lines []*bufio.Scanner
	)
	for range 3 {
		cmd, out := helper(t, path, "admit")
		cmds = append(cmds, cmd)
		lines = append(lines, out)
	}
	total := 0
	for i, out := range lines {
		n := -1
		for out.Scan() {
			if v, ok := strings.CutPrefix(out.Text(), "admitted "); ok {
				var err error
				n, err = strconv.Atoi(v)
				require.NoError(t, err)
			}
		}
		require.NoError(t, cmds[i].Wait())
		require.GreaterOrEqual(t, n, 0, "helper %d said nothing", i)
		total += n
	}
	require.Equal(t, 50, total)

	s := openTest(t, path)
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 50, c.Active())
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

// TestKillMidWrite kills a process with SIGKILL while it writes as fast as
// it can: the file stays intact and the counters exact.
func TestKillMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "sluice.db")
	for round := range 3 {
		cmd, out := helper(t, path, "churn")
		require.True(t, out.Scan(), "helper never got ready")
		require.Equal(t, "ready", out.Text())
		time.Sleep(time.Duration(100+round*70) * time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()

		s, err := Open(t.Context(), path)
		require.NoError(t, err)
		var check string
		require.NoError(t, s.r.QueryRowContext(t.Context(), `PRAGMA integrity_check`).Scan(&check))
		require.Equal(t, "ok", check)
		drift, err := s.Reconcile(t.Context())
		require.NoError(t, err)
		require.Zero(t, drift, "round %d", round)
		c, err := s.Stats(t.Context())
		require.NoError(t, err)
		require.Positive(t, c.Active())
		require.NoError(t, s.Close())
	}
}
