package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaosShort runs the real binaries as separate processes under a
// steady load for about 45 s while kill -9'ing a random service every few
// seconds and NATS once, then checks that no admitted job was lost and that
// the admission cap and worker limits held throughout.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	runProfile(t, 35*time.Second, 4000)
}

// runProfile builds and starts the cluster, runs load for the given time
// (at most maxJobs submits) and fails the test on any broken invariant.
func runProfile(t *testing.T, load time.Duration, maxJobs int) {
	ctx, cancel := context.WithTimeout(context.Background(), load+5*time.Minute)
	defer cancel()

	bin := t.TempDir()
	if err := Build(ctx, bin); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	c, err := Start(Config{BinDir: bin, WorkDir: work})
	t.Cleanup(c.Close) // kills every process by pid, also when Start failed half way
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(work, "logs"))
		}
	}()

	rep, err := c.Run(ctx, Profile{
		Load:        load,
		MaxJobs:     maxJobs,
		SubmitEvery: 25 * time.Millisecond,
		MinSleep:    50 * time.Millisecond,
		MaxSleep:    300 * time.Millisecond,
		KillEvery:   3 * time.Second,
		KillPause:   500 * time.Millisecond,
		NATSRestart: true,
		Seed:        uint64(time.Now().UnixNano()),
		Logf:        t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Summary())
	for _, v := range rep.Violations() {
		t.Error(v)
	}
}

func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		t.Logf("--- %s (last %d lines)\n%s", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
}

// TestChaosLong is the long profile (`make chaos`): the same cluster and
// checks under load for SLUICE_CHAOS_LONG (e.g. 10m). Skipped unless set.
func TestChaosLong(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("SLUICE_CHAOS_LONG"))
	if err != nil || d <= 0 {
		t.Skip("chaos: set SLUICE_CHAOS_LONG (e.g. 10m) to run the long profile")
	}
	runProfile(t, d, int(d/(12*time.Millisecond))+1)
}
