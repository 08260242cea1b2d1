package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
)

// Spawn on overflow under chaos. The schedulers run with SLUICE_SCHEDULER_SPAWN=
// command; their command only drops a request file in a spool directory,
// and the harness starts the worker: so every spawned worker is a process
// of the harness, journaled, killed and counted like the others (but never
// restarted: it leaves when idle, spawnIdle after its last job).

// spawnIdle is a spawned worker's SLUICE_WORKER_IDLE_TIMEOUT.
const spawnIdle = 3 * time.Second

// spawnEnv makes the spool and the spawn command, and returns the
// schedulers' environment for them.
func (c *Cluster) spawnEnv(cfg Config) ([]string, error) {
	c.spool = filepath.Join(cfg.WorkDir, "spawn")
	if err := os.MkdirAll(c.spool, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	script := filepath.Join(cfg.WorkDir, "spawn.sh")
	body := "#!/bin/sh\nexec touch \"" + c.spool + "/req-$$-$SLUICE_SCALE_KIND\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return []string{
		"SLUICE_SCHEDULER_SPAWN=command",
		"SLUICE_SCHEDULER_SPAWN_COMMAND=" + script,
		fmt.Sprintf("SLUICE_SCHEDULER_MAX_SPAWNED=%d", cfg.spawnPerScheduler()),
		"SLUICE_SCHEDULER_SPAWN_COOLDOWN=1s",
		"SLUICE_SCHEDULER_SPAWN_TIMEOUT=5s",
	}, nil
}

// spawnPerScheduler is each scheduler's SLUICE_SCHEDULER_MAX_SPAWNED: every replica
// bounds its own requests, so Spawn is shared among them.
func (c Config) spawnPerScheduler() int { return max(1, c.Spawn/max(c.Schedulers, 1)) }

// spawnedLimit is the most spawned workers live at once.
func (c Config) spawnedLimit() int {
	if c.Spawn <= 0 {
		return 0
	}
	return c.spawnPerScheduler() * c.Schedulers
}

// spawnLoop starts a worker for every request in the spool until ctx ends.
func (c *Cluster) spawnLoop(ctx context.Context, logf func(string, ...any)) {
	if c.spool == "" {
		return
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		entries, err := os.ReadDir(c.spool)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if os.Remove(filepath.Join(c.spool, e.Name())) != nil {
				continue
			}
			c.mu.Lock()
			c.spawned++
			n := c.spawned
			c.mu.Unlock()
			id, name := fmt.Sprintf("chaos-s%d", n), fmt.Sprintf("spawned-%d", n)
			p := c.newProc(name, "worker", "probeworker", []string{"-journal", filepath.Join(c.JournalDir, name+journal.Ext)},
				append(workerResourceEnv(),
					"SLUICE_WORKER_ID="+id, "SLUICE_WORKER_KINDS=sleep", "SLUICE_WORKER_SPAWNED=true",
					"SLUICE_WORKER_IDLE_TIMEOUT="+spawnIdle.String(),
					fmt.Sprintf("SLUICE_WORKER_MAX_CONCURRENT_TASKS=%d", c.cfg.WorkerLimit))...)
			p.workerID, p.transient = id, true
			if err := p.start(); err != nil {
				logf("chaos: start %s: %v", name, err)
				continue
			}
			c.addProc(p)
			logf("chaos: spawned %s on a scale request", name)
		}
	}
}

// Spawned is how many workers the harness started on scale requests.
func (c *Cluster) Spawned() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spawned
}
