// Package chaos is Sluice's crash and fault harness. It builds the real
// service binaries, runs them as separate processes on 127.0.0.1 (a
// standalone NATS server, two gateways, two schedulers, four workers, a
// reaper, all on one embedded store file), drives a steady submit load
// against both gateways while it kill -9's and restarts random services
// (and NATS once), then checks the guarantees of DESIGN.md against the store:
// no admitted job lost, active jobs never above the cap, no worker above its
// limit.
//
// Every process is tracked by its pid and killed by pid; nothing is ever
// killed by name.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Service binaries the harness builds, by name, and their packages.
var packages = map[string]string{
	"natsd":     "github.com/sluicehq/sluice/cmd/sluice/internal/chaos/natsd",
	"gateway":   "github.com/sluicehq/sluice/services/gateway",
	"scheduler": "github.com/sluicehq/sluice/services/scheduler",
	"worker":    "github.com/sluicehq/sluice/services/worker",
	"reaper":    "github.com/sluicehq/sluice/services/reaper",
}

// Build compiles every binary the harness runs into dir (without -race: they
// are separate processes). It must run inside the Sluice workspace.
func Build(ctx context.Context, dir string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range []string{"natsd", "gateway", "scheduler", "worker", "reaper"} {
		args = append(args, packages[name])
	}
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: go build: %w\n%s", err, out)
	}
	return nil
}

// Config sizes the cluster.
type Config struct {
	BinDir  string // where Build put the binaries
	WorkDir string // data dir (store file, NATS files) and process logs

	Gateways, Schedulers, Workers int
	WorkerLimit                   int // SLUICE_WORKER_MAX_CONCURRENT_TASKS
	MaxActive                     int // SLUICE_MAX_ACTIVE
	HeartbeatInterval             time.Duration
	StaleThreshold                time.Duration
	RetryInterval                 time.Duration
	DispatchDeadline              time.Duration
}

func (c *Config) defaults() {
	if c.Gateways <= 0 {
		c.Gateways = 2
	}
	if c.Schedulers <= 0 {
		c.Schedulers = 2
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.WorkerLimit <= 0 {
		c.WorkerLimit = 2
	}
	if c.MaxActive <= 0 {
		c.MaxActive = 40
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 200 * time.Millisecond
	}
	if c.StaleThreshold <= 0 {
		c.StaleThreshold = 2 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 200 * time.Millisecond
	}
	if c.DispatchDeadline <= 0 {
		c.DispatchDeadline = 20 * time.Second
	}
}

// Proc is one service process: its name (e.g. "worker-2"), service kind and
// the pid of its current incarnation.
type Proc struct {
	Name    string
	Service string
	bin     string
	args    []string
	env     []string
	log     string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	started  time.Time
	workerID string
}

// Started is when the current incarnation was started.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// kill sends SIGKILL to the current incarnation's pid and waits for it.
func (p *Proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// alive reports whether the current incarnation is still running (a service
// may also exit by itself, e.g. on a fatal error).
func (p *Proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Cluster is the running set of processes.
type Cluster struct {
	cfg       Config
	NATSURL   string
	Gateways  []string // base URLs
	StorePath string
	NATS      *Proc
	Procs     []*Proc // every service but NATS
}

// Start launches NATS and every service and waits until NATS accepts
// connections. Call Close when done, also on error.
func Start(cfg Config) (*Cluster, error) {
	cfg.defaults()
	dataDir := filepath.Join(cfg.WorkDir, "data")
	logDir := filepath.Join(cfg.WorkDir, "logs")
	for _, d := range []string{dataDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	c := &Cluster{cfg: cfg, StorePath: filepath.Join(dataDir, "sluice.db")}
	natsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", natsPort)
	c.NATSURL = "nats://" + natsAddr
	c.NATS = &Proc{Name: "natsd", Service: "natsd", bin: filepath.Join(cfg.BinDir, "natsd"),
		args: []string{"-listen", natsAddr, "-dir", filepath.Join(cfg.WorkDir, "nats")},
		env:  []string{"PATH=" + os.Getenv("PATH")}, log: filepath.Join(logDir, "natsd.log")}

	common := []string{
		"PATH=" + os.Getenv("PATH"),
		"SLUICE_NATS_URL=" + c.NATSURL,
		"SLUICE_DATA_DIR=" + dataDir,
		"SLUICE_LOG_LEVEL=warn",
		"SLUICE_HEARTBEAT_INTERVAL=" + cfg.HeartbeatInterval.String(),
		"SLUICE_STALE_THRESHOLD=" + cfg.StaleThreshold.String(),
		"SLUICE_RETRY_INTERVAL=" + cfg.RetryInterval.String(),
		"SLUICE_DISPATCH_DEADLINE=" + cfg.DispatchDeadline.String(),
		"SLUICE_MAX_ACTIVE=" + fmt.Sprint(cfg.MaxActive),
		// Short enough that a killed scheduler's claims and unacked
		// messages come back within the profile.
		"SLUICE_OFFER_TIMEOUT=500ms",
		"SLUICE_CLAIM_TTL=2s",
		"SLUICE_ACK_WAIT=3s",
		"SLUICE_SHUTDOWN_TIMEOUT=2s",
		// The harness measures the admission cap: gateway rate limits
		// (also 429) stay off so every 429 is a cap rejection.
		"SLUICE_RATE_LIMIT_TENANT=0",
		"SLUICE_RATE_LIMIT_IP=0",
	}
	add := func(name, service string, extra ...string) *Proc {
		p := &Proc{Name: name, Service: service, bin: filepath.Join(cfg.BinDir, service),
			env: append(append([]string(nil), common...), extra...), log: filepath.Join(logDir, name+".log")}
		c.Procs = append(c.Procs, p)
		return p
	}
	for i := 1; i <= cfg.Gateways; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c.Gateways = append(c.Gateways, "http://"+addr)
		add(fmt.Sprintf("gateway-%d", i), "gateway", "SLUICE_HTTP_ADDR="+addr)
	}
	for i := 1; i <= cfg.Schedulers; i++ {
		add(fmt.Sprintf("scheduler-%d", i), "scheduler")
	}
	for i := 1; i <= cfg.Workers; i++ {
		id := fmt.Sprintf("chaos-w%d", i)
		p := add(fmt.Sprintf("worker-%d", i), "worker", "SLUICE_WORKER_ID="+id,
			fmt.Sprintf("SLUICE_WORKER_MAX_CONCURRENT_TASKS=%d", cfg.WorkerLimit))
		p.workerID = id
	}
	add("reaper", "reaper", "SLUICE_REAPER_INTERVAL=500ms")

	if err := c.NATS.start(); err != nil {
		return c, err
	}
	if err := waitTCP(natsAddr, 15*time.Second); err != nil {
		return c, fmt.Errorf("chaos: natsd: %w", err)
	}
	for _, p := range c.Procs {
		if err := p.start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Restart kill -9's p and starts it again after pause.
func (c *Cluster) Restart(p *Proc, pause time.Duration) error {
	p.kill()
	time.Sleep(pause)
	return p.start()
}

// Close kills every process (by pid) and waits for each.
func (c *Cluster) Close() {
	if c == nil {
		return
	}
	for _, p := range c.Procs {
		p.kill()
	}
	if c.NATS != nil {
		c.NATS.kill()
	}
}

// workerStarts maps each worker id to the start of its current incarnation.
func (c *Cluster) workerStarts() map[string]time.Time {
	m := map[string]time.Time{}
	for _, p := range c.Procs {
		if p.workerID != "" {
			m[p.workerID] = p.Started()
		}
	}
	return m
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s not accepting after %s", addr, within), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
