// Package spawn asks for more workers when ready jobs find no free slot.
//
// The workers' own idle timeout and max lifetime make the pool shrink when
// the load goes; without a way to grow it, capacity could only go down. So
// a scheduler looks every Interval at the kinds with ready jobs, and for
// each kind that no live worker has a free slot for it makes one bounded
// scale request: at most one per Cooldown per kind, at most one command in
// flight per kind, and never while Max spawned workers (those that say so
// when they announce themselves) are live or on their way. Every request is
// published on contracts.SubjectScaleRequest and counted, so that an
// outside autoscaler can act on it; Mode "command" also runs Command with
// the request in its environment (SLUICE_SCALE_KIND, SLUICE_SCALE_READY,
// SLUICE_SCALE_OLDEST_WAIT_MS), and "sluice dev" answers the requests
// itself when SLUICE_SCHEDULER_SPAWN=dev.
//
// Every scheduler replica looks on its own: with several, a kind may get
// one request per replica per cooldown.
package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Modes of Config.Mode.
const (
	// ModePublish only publishes the requests (the default, "").
	ModePublish = ""
	// ModeCommand also runs Config.Command.
	ModeCommand = "command"
	// ModeDev leaves the requests to "sluice dev", which starts a worker.
	ModeDev = "dev"
)

// backlogLimit bounds the ready jobs one look counts per kind.
const backlogLimit = 10_000

// Config says when and how to ask for workers.
type Config struct {
	Mode     string
	Command  []string
	Cooldown time.Duration
	Max      int
	Timeout  time.Duration
	Interval time.Duration
}

// Jobs is what the spawner reads of the store.
type Jobs interface {
	PendingKinds(ctx context.Context) ([]string, error)
	Backlog(ctx context.Context, kind string, now time.Time, limit int) (int, time.Time, error)
}

// Room is the free slots of the live workers, by kind.
type Room interface{ Room() map[string]int }

// Workers are the live workers.
type Workers interface{ Workers() []contracts.WorkerInfo }

// Publisher sends a message.
type Publisher interface {
	Publish(subject string, data []byte) error
}

// Spawner makes scale requests. It is safe for concurrent use.
type Spawner struct {
	cfg     Config
	jobs    Jobs
	room    Room
	workers Workers
	pub     Publisher
	now     func() time.Time
	log     zerolog.Logger
	m       *metrics.Scheduler

	mu       sync.Mutex
	last     map[string]time.Time // last request per kind
	running  map[string]bool      // a command in flight per kind
	asked    []time.Time          // requests no new spawned worker answered yet
	known    map[string]bool      // spawned workers seen so far
	commands sync.WaitGroup
}

// New returns a Spawner.
func New(cfg Config, jobs Jobs, room Room, workers Workers, pub Publisher, now func() time.Time, log zerolog.Logger, m *metrics.Scheduler) *Spawner {
	if now == nil {
		now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &Spawner{cfg: cfg, jobs: jobs, room: room, workers: workers, pub: pub, now: now,
		log: log.With().Str("component", "spawn").Logger(), m: m,
		last: map[string]time.Time{}, running: map[string]bool{}, known: map[string]bool{}}
}

// Run looks every Interval until ctx ends, then waits for its commands.
// A spawner that runs commands first waits one spawn Timeout: the workers
// its previous run (before a restart) asked for have then announced
// themselves or are given up, so its bound counts them.
func (s *Spawner) Run(ctx context.Context) error {
	defer s.commands.Wait()
	if s.cfg.Max <= 0 {
		return nil
	}
	if s.cfg.Mode == ModeCommand {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.cfg.Timeout):
		}
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := s.Check(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("looking for kinds short of workers failed; trying again")
		}
	}
}

// Check makes the scale requests due now and returns them.
func (s *Spawner) Check(ctx context.Context) ([]contracts.ScaleRequest, error) {
	kinds, err := s.jobs.PendingKinds(ctx)
	if err != nil || len(kinds) == 0 {
		return nil, err
	}
	room := s.room.Room()
	now := s.now()
	live := s.observe(now)
	var out []contracts.ScaleRequest
	for _, kind := range kinds {
		if room[kind] != 0 { // free slots (or no limit): nothing to ask for
			continue
		}
		if !s.due(kind, now, live) {
			continue
		}
		ready, oldest, err := s.jobs.Backlog(ctx, kind, now, backlogLimit)
		if err != nil {
			return out, err
		}
		if ready == 0 {
			s.unask(kind)
			continue // only delayed jobs, or claimed ones
		}
		req := contracts.ScaleRequest{Kind: kind, Ready: ready, OldestWaitMS: max(now.Sub(oldest).Milliseconds(), 0), Live: live, At: now.UTC(),
			Spawner: s.cfg.Mode}
		s.request(ctx, req)
		out = append(out, req)
	}
	return out, nil
}

// observe counts the live spawned workers, and lets each one seen for the
// first time answer the oldest request still open; requests older than
// the spawn timeout are given up.
func (s *Spawner) observe(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := 0
	for _, w := range s.workers.Workers() {
		if !w.Spawned {
			continue
		}
		live++
		if !s.known[w.ID] {
			s.known[w.ID] = true
			if len(s.asked) > 0 {
				s.asked = s.asked[1:]
			}
		}
	}
	for len(s.asked) > 0 && now.Sub(s.asked[0]) > s.cfg.Timeout {
		s.asked = s.asked[1:]
	}
	return live
}

// due reports whether kind may get a request now, with live spawned
// workers and those asked for under the bound, and takes the kind's turn
// if so.
func (s *Spawner) due(kind string, now time.Time, live int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running[kind]:
		return false
	case now.Sub(s.last[kind]) < s.cfg.Cooldown:
		return false
	case live+len(s.asked) >= s.cfg.Max:
		return false
	}
	s.last[kind] = now
	s.asked = append(s.asked, now)
	return true
}

// unask takes back the turn due just took for kind: nothing was asked.
func (s *Spawner) unask(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, kind)
	if len(s.asked) > 0 {
		s.asked = s.asked[:len(s.asked)-1]
	}
}

// request publishes req, counts it, and runs the command in command mode.
func (s *Spawner) request(ctx context.Context, req contracts.ScaleRequest) {
	data, err := json.Marshal(req)
	if err == nil {
		err = s.pub.Publish(contracts.SubjectScaleRequest, data)
	}
	if err != nil {
		s.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectScaleRequest).Msg("scale request not published")
	}
	s.m.ScaleRequests.WithLabelValues(req.Kind, "published").Inc()
	s.log.Info().Str("kind", req.Kind).Int("ready", req.Ready).Int64("oldest_wait_ms", req.OldestWaitMS).
		Int("live_spawned", req.Live).Msg("asking for one more worker")
	if s.cfg.Mode != ModeCommand || len(s.cfg.Command) == 0 {
		return
	}
	s.mu.Lock()
	s.running[req.Kind] = true
	s.mu.Unlock()
	s.commands.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.running, req.Kind)
			s.mu.Unlock()
		}()
		if err := s.runCommand(context.WithoutCancel(ctx), req); err != nil {
			s.m.ScaleRequests.WithLabelValues(req.Kind, "command_failed").Inc()
			s.log.Warn().Err(err).Str("kind", req.Kind).Msg("spawn command failed")
		}
	})
}

// runCommand runs the spawn command for req within the timeout and logs
// its output.
func (s *Spawner) runCommand(ctx context.Context, req contracts.ScaleRequest) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Env = append(os.Environ(),
		"SLUICE_SCALE_KIND="+req.Kind,
		"SLUICE_SCALE_READY="+strconv.Itoa(req.Ready),
		"SLUICE_SCALE_OLDEST_WAIT_MS="+strconv.FormatInt(req.OldestWaitMS, 10),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s.log.Info().Str("kind", req.Kind).Str("output", tailString(out.String(), 4096)).Err(err).Msg("spawn command ran")
	if err != nil {
		return fmt.Errorf("spawn: %s: %w", s.cfg.Command[0], err)
	}
	return nil
}

// tailString is the last n bytes of s.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
