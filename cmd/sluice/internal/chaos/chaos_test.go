package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shortProfile is the profile of TestChaosShort, and the base of the others.
func shortProfile(load time.Duration) Profile {
	return Profile{
		Load:          load,
		SubmitEvery:   25 * time.Millisecond,
		MinSleep:      50 * time.Millisecond,
		MaxSleep:      300 * time.Millisecond,
		LongShare:     0.1,
		LongMin:       time.Second,
		LongMax:       3 * time.Second,
		KillEvery:     3 * time.Second,
		KillPause:     500 * time.Millisecond,
		NATSRestarts:  1,
		StreamDeletes: 1,
		Sigstops:      2,
	}
}

// TestChaosShort runs the real binaries as separate processes on the
// embedded store under a steady load from three tenants for about 35 s
// while kill -9'ing a random service every few seconds, NATS once,
// deleting the job stream once and freezing a worker twice past the stale
// threshold, then checks that no admitted job was lost, no two attempts of
// a job ran at once, and the caps and worker limits held throughout.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	p := shortProfile(35 * time.Second)
	p.MaxJobs = 4000
	runProfile(t, Config{Store: StoreEmbedded, Spawn: 2}, p)
}

// TestChaosLong is the long profile (`make chaos`): the same cluster and
// checks under load for SLUICE_CHAOS_LONG (e.g. 10m), with a NATS restart
// every 3 minutes, a stream delete every 2 and a SIGSTOP every minute.
// Skipped unless set.
func TestChaosLong(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("SLUICE_CHAOS_LONG"))
	if err != nil || d <= 0 {
		t.Skip("chaos: set SLUICE_CHAOS_LONG (e.g. 10m) to run the long profile")
	}
	p := shortProfile(d)
	p.MaxJobs = int(d/(12*time.Millisecond)) + 1
	p.NATSRestarts = max(1, int(d/(3*time.Minute)))
	p.StreamDeletes = max(1, int(d/(2*time.Minute)))
	p.Sigstops = max(2, int(d/time.Minute))
	runProfile(t, Config{Store: StoreEmbedded}, p)
}

// TestChaosCluster is the short profile on a 3-node NATS cluster with
// the streams at 3 replicas: every NATS fault kill -9's one node (three
// times, so the harness may hit each) and restarts it while the others
// carry on. It runs with `make test`.
func TestChaosCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	p := shortProfile(30 * time.Second)
	p.MaxJobs = 3000
	p.NATSRestarts = 3
	runProfile(t, Config{Store: StoreEmbedded, NATSNodes: 3}, p)
}

// TestChaosMongoShort is the short profile on the MongoDB driver against a
// FerretDB process that is itself kill -9'd and restarted twice. FerretDB
// takes one command at a time, so the load and the cap are lower and the
// timings longer. It runs with `make chaos`, or when SLUICE_CHAOS_MONGO=1.
func TestChaosMongoShort(t *testing.T) {
	if os.Getenv("SLUICE_CHAOS_MONGO") != "1" {
		t.Skip("chaos: set SLUICE_CHAOS_MONGO=1 to run the MongoDB (FerretDB) profile")
	}
	p := shortProfile(40 * time.Second)
	p.SubmitEvery = 150 * time.Millisecond
	p.MinSleep, p.MaxSleep = 200*time.Millisecond, time.Second
	p.KillEvery = 4 * time.Second
	p.StoreRestarts = 2
	p.StorePause = time.Second
	p.SampleEvery = 500 * time.Millisecond
	runProfile(t, Config{
		Store:             StoreMongo,
		MaxActive:         6,
		TenantMaxActive:   3,
		HeartbeatInterval: 300 * time.Millisecond,
		StaleThreshold:    3 * time.Second,
		RetryInterval:     500 * time.Millisecond,
		DispatchDeadline:  30 * time.Second,
		ReaperInterval:    time.Second,
	}, p)
}

// runProfile builds and starts the cluster, runs the profile and fails the
// test on any broken invariant.
func runProfile(t *testing.T, cfg Config, p Profile) {
	began := time.Now()
	cfg.BinDir, cfg.WorkDir = binaries(t.Context(), t, cfg.Store), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), p.Load+5*time.Minute)
	defer cancel()
	if dir := os.Getenv("SLUICE_CHAOS_WORKDIR"); dir != "" {
		// Kept after the test, to read the logs and journals.
		cfg.WorkDir = filepath.Join(dir, t.Name())
		require.NoError(t, os.RemoveAll(cfg.WorkDir))
		t.Logf("chaos: work dir %s", cfg.WorkDir)
	}
	c, err := Start(cfg)
	t.Cleanup(c.Close) // kills every process by pid, also when Start failed half way
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(cfg.WorkDir, "logs"))
		}
	}()

	p.Seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("SLUICE_CHAOS_SEED"); v != "" {
		// Replays a reported run's load and fault timeline (the timing of
		// the processes themselves is never the same twice).
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "SLUICE_CHAOS_SEED must be an unsigned integer")
		p.Seed = seed
	}
	p.Logf = t.Logf
	rep, err := c.Run(ctx, p)
	require.NoError(t, err)
	t.Log(rep.Summary())
	t.Logf("chaos: whole test took %s (seed %d)", time.Since(began).Round(time.Second), p.Seed)
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
