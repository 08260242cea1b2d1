// Package chaos is Sluice's crash and fault harness. It builds the real
// service binaries, runs them as separate processes on 127.0.0.1 (a
// standalone NATS server or a cluster of three, two gateways, three
// schedulers, four workers, a reaper, all on one store: the embedded
// SQLite file, or MongoDB's driver against a FerretDB process of its
// own), drives a steady submit load from
// several tenants against both gateways while it kill -9's and restarts
// random services, restarts NATS (and the store process), deletes the job
// stream and freezes workers with SIGSTOP past the stale threshold, then
// checks the guarantees of DESIGN.md: no admitted job lost, active jobs
// never above the global or a tenant's cap, no worker above its limit, and,
// from the probe workers' journals, no two attempts of one job running at
// once.
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
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
)

// Binaries the harness builds, by name, and their packages.
var packages = map[string]string{
	"natsd":       "github.com/sluicehq/sluice/cmd/sluice/internal/chaos/natsd",
	"probeworker": "github.com/sluicehq/sluice/cmd/sluice/internal/chaos/probeworker",
	"ferretd":     "github.com/sluicehq/sluice/pkg/store/mongo/internal/ferrettest/ferretd",
	"gateway":     "github.com/sluicehq/sluice/services/gateway",
	"scheduler":   "github.com/sluicehq/sluice/services/scheduler",
	"reaper":      "github.com/sluicehq/sluice/services/reaper",
	"worker":      "github.com/sluicehq/sluice/services/worker",
}

// StoreKind selects the store the services share.
type StoreKind string

// Store kinds.
const (
	// StoreEmbedded is the embedded SQLite store: one file every process opens.
	StoreEmbedded StoreKind = "sqlite"
	// StoreMongo is the MongoDB driver against a FerretDB process (ferretd)
	// that the harness also kills and restarts.
	StoreMongo StoreKind = "mongodb"
)

// Build compiles every binary a cluster on store kind runs into dir
// (without -race: they are separate processes). It must run inside the
// Sluice workspace.
func Build(ctx context.Context, dir string, kind StoreKind) error {
	names := []string{"natsd", "probeworker", "gateway", "scheduler", "reaper"}
	if kind == StoreMongo {
		names = append(names, "ferretd")
	}
	return BuildBinaries(ctx, dir, names...)
}

// BuildBinaries compiles the named binaries of the harness ("natsd",
// "probeworker", "ferretd", "gateway", "scheduler", "reaper", "worker")
// into dir, like Build.
func BuildBinaries(ctx context.Context, dir string, names ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range names {
		pkg, ok := packages[name]
		if !ok {
			return fmt.Errorf("chaos: no binary %q to build", name)
		}
		args = append(args, pkg)
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
	WorkDir string // data dirs, journals and process logs
	Store   StoreKind

	Gateways, Schedulers, Workers int
	WorkerLimit                   int // SLUICE_WORKER_MAX_CONCURRENT_TASKS
	MaxActive                     int // SLUICE_MAX_ACTIVE
	Tenants                       int // tenants with a token each (SLUICE_API_TOKENS)
	TenantMaxActive               int // SLUICE_TENANT_MAX_ACTIVE
	HeartbeatInterval             time.Duration
	StaleThreshold                time.Duration
	RetryInterval                 time.Duration
	DispatchDeadline              time.Duration
	ReaperInterval                time.Duration
	// Spawn, when positive, lets the schedulers ask for up to that many
	// spawned workers (SLUICE_SCHEDULER_SPAWN=command; see spawn.go).
	Spawn int
	// NATSNodes is the size of the NATS cluster: 1 (the default) is one
	// standalone server; 3 is a cluster with the streams at 3 replicas
	// (SLUICE_STREAM_REPLICAS), whose NATS faults kill one node at a time.
	NATSNodes int
	// RealWorkers runs the worker service's own binary (built-in kind
	// "sleep") instead of the probe worker, whose "probe" kind the fault
	// profiles submit: for measuring the services as users run them.
	RealWorkers bool
	// WorkersLater leaves the workers stopped in Start: StartWorkers
	// starts them (e.g. once a backlog has been admitted).
	WorkersLater bool
	// Env is more settings for every service, after the harness's own (a
	// variable set twice takes the later value).
	Env []string
}

func (c *Config) defaults() {
	if c.Store == "" {
		c.Store = StoreEmbedded
	}
	if c.NATSNodes <= 0 {
		c.NATSNodes = 1
	}
	if c.Gateways <= 0 {
		c.Gateways = 2
	}
	if c.Schedulers <= 0 {
		c.Schedulers = 3
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
	if c.Tenants <= 0 {
		c.Tenants = 3
	}
	if c.TenantMaxActive <= 0 {
		c.TenantMaxActive = 16
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
	if c.ReaperInterval <= 0 {
		c.ReaperInterval = 500 * time.Millisecond
	}
}

// FenceAfter is how long a worker runs a job without an acknowledged
// heartbeat before it fences itself: two thirds of the stale threshold.
func (c Config) FenceAfter() time.Duration { return c.StaleThreshold * 2 / 3 }

// Tenant is one API tenant and its token.
type Tenant struct{ Name, Token string }

// Cluster is the running set of processes.
type Cluster struct {
	cfg        Config
	NATSURL    string
	Gateways   []string // base URLs
	Schedulers []string // base URLs of the schedulers' /metrics
	Tenants    []Tenant
	DataDir    string
	StoreURI   string // SLUICE_STORE: empty for the embedded store
	JournalDir string
	NATS       []*Proc // the NATS nodes (one unless Config.NATSNodes)
	StoreProc  *Proc   // ferretd; nil for the embedded store
	Procs      []*Proc // every service but NATS and the store (see procs)

	// mu guards Procs, which grows with spawned workers (spawn.go).
	mu    sync.Mutex
	spool string // where the spawn command leaves its requests
	// newProc makes a service's process, not started nor listed yet.
	newProc func(name, service, bin string, args []string, extra ...string) *Proc
	spawned int
}

// Start launches the store process (if any), NATS and every service and
// waits until NATS (and the store) accept connections. Call Close when
// done, also on error.
func Start(cfg Config) (*Cluster, error) {
	cfg.defaults()
	c := &Cluster{cfg: cfg, DataDir: filepath.Join(cfg.WorkDir, "data"), JournalDir: filepath.Join(cfg.WorkDir, "journal")}
	logDir := filepath.Join(cfg.WorkDir, "logs")
	for _, d := range []string{c.DataDir, logDir, c.JournalDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	baseEnv := []string{"PATH=" + os.Getenv("PATH")}
	natsAddrs, err := c.natsNodes(baseEnv, logDir)
	if err != nil {
		return nil, err
	}

	var storeAddr string
	if cfg.Store == StoreMongo {
		if storeAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		// Fail fast while the store is down: calls error out instead of
		// waiting 30 s for a server.
		c.StoreURI = "mongodb://" + storeAddr + "/sluice?serverSelectionTimeoutMS=2000&connectTimeoutMS=2000"
		c.StoreProc = &Proc{Name: "store", Service: "store", bin: filepath.Join(cfg.BinDir, "ferretd"),
			args: []string{"-listen", storeAddr, "-dir", filepath.Join(cfg.WorkDir, "ferret")},
			env:  baseEnv, log: filepath.Join(logDir, "store.log")}
	}

	var tokens []string
	for i := 1; i <= cfg.Tenants; i++ {
		t := Tenant{Name: fmt.Sprintf("tenant-%d", i), Token: fmt.Sprintf("chaos-token-%d", i)}
		c.Tenants = append(c.Tenants, t)
		tokens = append(tokens, t.Name+":"+t.Token)
	}
	common := append(append([]string(nil), baseEnv...),
		"SLUICE_NATS_URL="+c.NATSURL,
		"SLUICE_STREAM_REPLICAS="+fmt.Sprint(cfg.NATSNodes),
		"SLUICE_DATA_DIR="+c.DataDir,
		"SLUICE_STORE="+c.StoreURI,
		"SLUICE_LOG_LEVEL="+logLevel(),
		"SLUICE_API_TOKENS="+strings.Join(tokens, ","),
		// The harness reads the whole system (workers, every tenant's
		// counts) as the first tenant.
		"SLUICE_GATEWAY_OPERATOR_TENANTS="+c.Tenants[0].Name,
		"SLUICE_MAX_ACTIVE="+fmt.Sprint(cfg.MaxActive),
		"SLUICE_TENANT_MAX_ACTIVE="+fmt.Sprint(cfg.TenantMaxActive),
		"SLUICE_HEARTBEAT_INTERVAL="+cfg.HeartbeatInterval.String(),
		"SLUICE_STALE_THRESHOLD="+cfg.StaleThreshold.String(),
		"SLUICE_RETRY_INTERVAL="+cfg.RetryInterval.String(),
		"SLUICE_GATEWAY_RETRY_AFTER="+cfg.RetryInterval.String(),
		"SLUICE_DISPATCH_DEADLINE="+cfg.DispatchDeadline.String(),
		// Short enough that a killed scheduler's claims and unacked
		// messages come back within the profile.
		"SLUICE_SCHEDULER_OFFER_TIMEOUT=500ms",
		"SLUICE_SCHEDULER_CLAIM_TTL=2s",
		"SLUICE_SCHEDULER_ACK_WAIT=3s",
		"SLUICE_SHUTDOWN_TIMEOUT=2s",
		// The harness measures the admission caps: gateway rate limits
		// (also 429) stay off so every 429 is a cap rejection.
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT=0",
		"SLUICE_GATEWAY_RATE_LIMIT_IP=0",
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ=0",
	)
	common = append(common, cfg.Env...)
	c.newProc = func(name, service, bin string, args []string, extra ...string) *Proc {
		return &Proc{Name: name, Service: service, bin: filepath.Join(cfg.BinDir, bin), args: args,
			env: append(append([]string(nil), common...), extra...), log: filepath.Join(logDir, name+".log")}
	}
	add := func(name, service, bin string, args []string, extra ...string) *Proc {
		p := c.newProc(name, service, bin, args, extra...)
		c.addProc(p)
		return p
	}
	schedEnv := []string{}
	if cfg.Spawn > 0 {
		var err error
		if schedEnv, err = c.spawnEnv(cfg); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= cfg.Gateways; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		c.Gateways = append(c.Gateways, "http://"+addr)
		add(fmt.Sprintf("gateway-%d", i), "gateway", "gateway", nil, "SLUICE_HTTP_ADDR="+addr)
	}
	for i := 1; i <= cfg.Schedulers; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		c.Schedulers = append(c.Schedulers, "http://"+addr)
		p := add(fmt.Sprintf("scheduler-%d", i), "scheduler", "scheduler", nil, append([]string{"SLUICE_SCHEDULER_HTTP_ADDR=" + addr}, schedEnv...)...)
		p.metricsURL = "http://" + addr + "/metrics"
	}
	for i := 1; i <= cfg.Workers; i++ {
		id := fmt.Sprintf("chaos-w%d", i)
		name := fmt.Sprintf("worker-%d", i)
		bin, args := "probeworker", []string{"-journal", filepath.Join(c.JournalDir, name+journal.Ext)}
		if cfg.RealWorkers {
			bin, args = "worker", nil
		}
		p := add(name, "worker", bin, args, append(workerResourceEnv(),
			"SLUICE_WORKER_ID="+id, "SLUICE_WORKER_KINDS=sleep",
			fmt.Sprintf("SLUICE_WORKER_MAX_CONCURRENT_TASKS=%d", cfg.WorkerLimit))...)
		p.workerID = id
	}
	add("reaper", "reaper", "reaper", nil, "SLUICE_REAPER_INTERVAL="+cfg.ReaperInterval.String())

	if c.StoreProc != nil {
		if err := c.StoreProc.start(); err != nil {
			return c, err
		}
		if err := waitTCP(storeAddr, 30*time.Second); err != nil {
			return c, fmt.Errorf("chaos: ferretd: %w", err)
		}
	}
	for _, n := range c.NATS {
		if err := n.start(); err != nil {
			return c, err
		}
	}
	for i, addr := range natsAddrs {
		if err := waitTCP(addr, 15*time.Second); err != nil {
			return c, fmt.Errorf("chaos: %s: %w", c.NATS[i].Name, err)
		}
	}
	for _, p := range c.procs() {
		if cfg.WorkersLater && p.workerID != "" {
			continue
		}
		if err := p.start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// StartWorkers starts the worker processes that are not running: those
// Start left stopped with Config.WorkersLater.
func (c *Cluster) StartWorkers() error {
	for _, p := range c.workers() {
		if p.alive() {
			continue
		}
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

// natsNodes makes the NATS processes (not started) and sets NATSURL; it
// returns their client addresses.
func (c *Cluster) natsNodes(env []string, logDir string) ([]string, error) {
	n := c.cfg.NATSNodes
	clients := make([]string, n)
	routes := make([]string, n)
	for i := range n {
		var err error
		if clients[i], err = freeAddr(); err != nil {
			return nil, err
		}
		if routes[i], err = freeAddr(); err != nil {
			return nil, err
		}
		routes[i] = "nats-route://" + routes[i]
	}
	urls := make([]string, n)
	for i := range n {
		urls[i] = "nats://" + clients[i]
		name, dir := "natsd", filepath.Join(c.cfg.WorkDir, "nats")
		args := []string{"-listen", clients[i]}
		if n > 1 {
			name, dir = fmt.Sprintf("natsd-%d", i+1), filepath.Join(c.cfg.WorkDir, fmt.Sprintf("nats-%d", i+1))
			args = append(args, "-name", name, "-cluster", strings.TrimPrefix(routes[i], "nats-route://"),
				"-routes", strings.Join(routes, ","))
		}
		c.NATS = append(c.NATS, &Proc{Name: name, Service: "natsd", bin: filepath.Join(c.cfg.BinDir, "natsd"),
			args: append(args, "-dir", dir), env: env, log: filepath.Join(logDir, name+".log")})
	}
	c.NATSURL = strings.Join(urls, ",")
	return clients, nil
}

// Close kills every process (by pid) and waits for each.
func (c *Cluster) Close() {
	if c == nil {
		return
	}
	for _, p := range c.all() {
		p.kill()
	}
}

// all is every process: the services, NATS and the store process.
func (c *Cluster) all() []*Proc {
	out := c.procs()
	out = append(out, c.NATS...)
	if c.StoreProc != nil {
		out = append(out, c.StoreProc)
	}
	return out
}

// addProc lists p among the services (set its fields first: the faults
// read them as soon as it is listed).
func (c *Cluster) addProc(p *Proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Procs = append(c.Procs, p)
}

// procs is a copy of Procs.
func (c *Cluster) procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.Procs...)
}

// workers is the worker processes.
func (c *Cluster) workers() []*Proc {
	var out []*Proc
	for _, p := range c.procs() {
		if p.workerID != "" {
			out = append(out, p)
		}
	}
	return out
}

// aliveWorkers counts the worker processes running now.
func (c *Cluster) aliveWorkers() int {
	n := 0
	for _, p := range c.workers() {
		if p.alive() {
			n++
		}
	}
	return n
}

// workerStarts maps each worker id to the start of its current incarnation.
func (c *Cluster) workerStarts() map[string]time.Time {
	m := map[string]time.Time{}
	for _, p := range c.workers() {
		m[p.workerID] = p.Started()
	}
	return m
}

// freeAddr is a loopback address for a process that is started again on
// the same port after it is killed (bustest.FreeAddr).
func freeAddr() (string, error) {
	addr, err := bustest.FreeAddr()
	if err != nil {
		return "", fmt.Errorf("chaos: %w", err)
	}
	return addr, nil
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

// logLevel is the services' log level: SLUICE_CHAOS_LOG_LEVEL, or warn.
func logLevel() string {
	if l := os.Getenv("SLUICE_CHAOS_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}
