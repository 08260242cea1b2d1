package worker

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/services/worker/internal/inputs"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
)

// minRunPids is the least SLUICE_WORKER_MAX_RUN_PIDS: a run's launcher is
// a Go program with a few threads of its own before it execs the job's.
const minRunPids = 16

// Config is everything a worker reads from its environment. The defaults
// are the envDefault tags, and only those: DefaultConfig and LoadConfig
// both read them.
type Config struct {
	// Bus is the NATS connection (SLUICE_NATS_*); an empty URL embeds a server.
	Bus bus.Env
	// Log is the logger (SLUICE_LOG_LEVEL, SLUICE_LOG_FORMAT).
	Log observe.Env

	// WorkerID names the worker on NATS subjects; default: the sanitized
	// hostname plus a short random suffix.
	WorkerID string `env:"SLUICE_WORKER_ID" doc:"The worker's name on NATS subjects: 1-64 letters, digits, - or _. Default: the hostname plus a short random suffix."`
	// MaxConcurrent is how many jobs may run at once; 0 = no limit.
	MaxConcurrent int `env:"SLUICE_WORKER_MAX_CONCURRENT_TASKS" envDefault:"1" doc:"The most jobs the worker runs at once. 0 = no limit."`
	// HeartbeatInterval is how often leases are renewed and the worker announces itself.
	HeartbeatInterval time.Duration `env:"SLUICE_HEARTBEAT_INTERVAL" envDefault:"5s" doc:"How often the worker renews the leases of its running jobs and announces itself."`
	// StaleThreshold is the heartbeat age that makes a job stale; a handler
	// whose lease went unacknowledged for 2/3 of it is cancelled (self-fencing).
	StaleThreshold time.Duration `env:"SLUICE_STALE_THRESHOLD" envDefault:"30s" doc:"The heartbeat age that makes a running job stale: the schedulers and the reaper give its run up, and a worker stops a run whose heartbeats went unacknowledged for 2/3 of it. Must exceed twice SLUICE_HEARTBEAT_INTERVAL."`
	// IdleTimeout makes the worker exit after this long without jobs; 0 = never.
	IdleTimeout time.Duration `env:"SLUICE_WORKER_IDLE_TIMEOUT" doc:"The worker exits after this long without a job. 0 = never."`
	// MaxLifetime makes the worker drain and exit after this long; 0 = never.
	MaxLifetime time.Duration `env:"SLUICE_WORKER_MAX_LIFETIME" doc:"The worker drains and exits after this long. 0 = never."`
	// ExecAllow lists the programs the exec kind may run; empty refuses all.
	ExecAllow []string `env:"SLUICE_WORKER_EXEC_ALLOW" envSeparator:"," doc:"The programs the exec kind may run; empty refuses every exec job."`
	// ExecEnvAllow lists the environment variable names an exec job may
	// set; empty allows none.
	ExecEnvAllow []string `env:"SLUICE_WORKER_EXEC_ENV_ALLOW" envSeparator:"," doc:"The environment variable names an exec job may set; empty allows none."`
	// ExecDirs lists the roots an exec job's dir may resolve inside,
	// besides its run's scratch directory.
	ExecDirs []string `env:"SLUICE_WORKER_EXEC_DIRS" envSeparator:"," doc:"Absolute directories an exec job's dir may resolve inside, besides its run's scratch directory."`
	// ScratchDir is the root of the per-run scratch directories; default
	// a scratch folder in the data dir.
	ScratchDir string `env:"SLUICE_WORKER_SCRATCH_DIR" doc:"The root of the per-run scratch directories. Default: scratch in SLUICE_DATA_DIR."`
	// CacheDir is the root of the pinned-input cache (one folder per
	// worker); default a cache folder in the data dir.
	CacheDir string `env:"SLUICE_WORKER_CACHE_DIR" doc:"The root of the pinned-input cache (one folder per worker). Default: cache in SLUICE_DATA_DIR."`
	// MaxCacheBytes bounds the pinned-input cache (and so one input).
	MaxCacheBytes int64 `env:"SLUICE_WORKER_MAX_CACHE_BYTES" envOld:"SLUICE_WORKER_CACHE_BYTES" envDefault:"1073741824" doc:"The most bytes the pinned-input cache holds, and so the largest input."`
	// FetchAllow widens what inputs may be fetched from: hosts, addresses
	// or CIDRs of the worker's own network (loopback, link-local, private,
	// shared, unspecified, multicast, reserved: refused unless named here)
	// and the directories file:// inputs may be read under (none by
	// default). Public http(s) addresses are always allowed.
	FetchAllow []string `env:"SLUICE_WORKER_FETCH_ALLOW" envSeparator:"," doc:"What inputs may be fetched from besides public http(s) addresses: hosts, addresses or CIDRs of the worker's own network (loopback, private, link-local and the like are refused unless named here) and the directories file:// inputs may be read under (none by default)."`
	// FetchTimeout bounds the fetch of one input, a file's read included.
	FetchTimeout time.Duration `env:"SLUICE_WORKER_FETCH_TIMEOUT" envDefault:"5m" doc:"The longest the fetch of one input may take, a file's read included."`
	// MaxScratchBytes bounds what one run may keep in its scratch
	// directory; 0 = no bound. A run over it fails handler:.
	MaxScratchBytes int64 `env:"SLUICE_WORKER_MAX_SCRATCH_BYTES" envOld:"SLUICE_WORKER_SCRATCH_BYTES" doc:"The most bytes one run may keep in its scratch directory; a run over it fails handler:. 0 = no bound."`
	// Kinds lists the built-in kinds to register; empty registers none
	// (a Go service that embeds a worker registers its own with Handle).
	Kinds []string `env:"SLUICE_WORKER_KINDS" envDefault:"sleep,exec" envSeparator:"," doc:"The built-in kinds the worker runs (sleep, exec); empty registers none (a Go service that embeds a worker registers its own)."`
	// ShutdownTimeout bounds the wait for running handlers on shutdown;
	// those still running then are cancelled and requeued.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"How long a stopping service (SIGINT, SIGTERM) lets the work in flight finish: requests, offers, results, running handlers, a sweep. What is still running then is cancelled (a worker's jobs go back to the queue)."`
	// ProgressInterval is the least time between two progress reports of
	// one job; reports in between are coalesced (the latest wins).
	ProgressInterval time.Duration `env:"SLUICE_WORKER_PROGRESS_INTERVAL" envDefault:"500ms" doc:"The least time between two progress reports of one job; reports in between are coalesced (the latest wins)."`
	// HTTPAddr serves /healthz, /readyz and /metrics; empty = none.
	HTTPAddr string `env:"SLUICE_WORKER_HTTP_ADDR" doc:"Where the worker serves /healthz, /readyz and /metrics (host:port). Empty = not served."`
	// DataDir holds the embedded NATS server's files when NATS URL is
	// empty, and the default scratch and cache folders.
	DataDir string `env:"SLUICE_DATA_DIR" envDefault:"./.sluice" doc:"The directory of the embedded store (sluice.db), the embedded NATS server's files, and a worker's scratch and cache folders."`
	// ClaimWait bounds the wait for an accepted job's start heartbeat to be
	// acknowledged; a job not acknowledged in time never runs.
	ClaimWait time.Duration `env:"SLUICE_WORKER_CLAIM_WAIT" envDefault:"10s" doc:"How long the worker waits for an accepted job's first heartbeat to be acknowledged; a job not acknowledged in time never runs."`
	// DeliveryGrace is how long results may still be delivered after the
	// shutdown timeout passed.
	DeliveryGrace time.Duration `env:"SLUICE_WORKER_DELIVERY_GRACE" envDefault:"10s" doc:"How long results may still be delivered once SLUICE_SHUTDOWN_TIMEOUT has passed."`
	// Version is the release version the worker announces; the schedulers
	// skip workers older than their MinWorkerVersion.
	Version string `env:"SLUICE_WORKER_VERSION" doc:"The release version the worker announces (default: this release); the schedulers skip workers older than SLUICE_SCHEDULER_MIN_WORKER_VERSION."`
	// Spawned marks a worker started on a scale request: it says so when
	// it announces itself.
	Spawned bool `env:"SLUICE_WORKER_SPAWNED" doc:"Marks a worker started on a scale request (SLUICE_SCHEDULER_SPAWN): it says so when it announces itself, and counts against SLUICE_SCHEDULER_MAX_SPAWNED."`
	// ExecGrace is the exec kind's time between SIGTERM and SIGKILL.
	ExecGrace time.Duration `env:"SLUICE_WORKER_EXEC_GRACE" envDefault:"5s" doc:"The exec kind's time between SIGTERM and SIGKILL when it stops a program."`

	// CPU is the cores the worker's jobs may declare in all; default what
	// its cgroup allows, else the machine's cores.
	CPU float64 `env:"SLUICE_WORKER_CPU" doc:"The CPU cores the declared resources of the worker's running jobs may add up to. Default: what the worker's cgroup allows (cpu.max, or cpu.cfs_quota_us / cpu.cfs_period_us), else the machine's cores."`
	// Memory is the memory the worker's jobs may declare in all (a byte
	// count or an IEC amount, "2GiB"); default what its cgroup allows,
	// else the machine's MemTotal.
	Memory string `env:"SLUICE_WORKER_MEMORY" doc:"The memory the declared resources of the worker's running jobs may add up to: bytes, or a number with KiB, MiB, GiB or TiB. Default: what the worker's cgroup allows (memory.max, or memory.limit_in_bytes), else the machine's MemTotal."`
	// KindResources are the resources a job of a kind gets when it
	// declares none: "transcode:cpu=2,memory=1GiB;sleep:cpu=0.1".
	KindResources string `env:"SLUICE_WORKER_KIND_RESOURCES" doc:"The resources a job of a kind gets when it declares none, as kind:cpu=N,memory=AMOUNT entries separated by ';' (transcode:cpu=2,memory=1GiB;sleep:cpu=0.1). A kind not listed gets one slot's share: SLUICE_WORKER_CPU and SLUICE_WORKER_MEMORY divided by SLUICE_WORKER_MAX_CONCURRENT_TASKS (nothing when that is 0)."`
	// TargetMemory and TargetCPU turn on measured backpressure: above
	// that fraction of the worker's memory or CPU in use (as measured),
	// it answers busy. 0 = off.
	TargetMemory float64 `env:"SLUICE_WORKER_TARGET_MEMORY" doc:"Measured backpressure: the worker answers busy while the memory it measures in use is above this fraction (0-1) of SLUICE_WORKER_MEMORY. 0 = off."`
	TargetCPU    float64 `env:"SLUICE_WORKER_TARGET_CPU" doc:"Measured backpressure: the worker answers busy while the CPU it measures in use is above this fraction (0-1) of SLUICE_WORKER_CPU. 0 = off."`
	// SampleInterval is how often use is measured when a target is set.
	SampleInterval time.Duration `env:"SLUICE_WORKER_SAMPLE_INTERVAL" envDefault:"1s" doc:"How often the worker measures its memory and CPU use when SLUICE_WORKER_TARGET_MEMORY or SLUICE_WORKER_TARGET_CPU is set."`
	// RunUIDs are the uids (and gids) exec runs get, one per live run,
	// when the worker may switch users; empty keeps the worker's.
	RunUIDs string `env:"SLUICE_WORKER_RUN_UIDS" envDefault:"1900000000-1900065535" doc:"The uids (and the same gids) exec runs get, one of its own per live run, as first-last, when the worker may switch users (root, or CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL, CAP_DAC_OVERRIDE and CAP_FOWNER): no uid in it may belong to anyone else on the host. Workers of one host share it through lock files in /run/sluice/run-uids. Empty = runs keep the worker's uid."`
	// ExecRequireIsolation makes a worker that cannot give runs a uid of
	// their own refuse the exec kind.
	ExecRequireIsolation bool `env:"SLUICE_WORKER_EXEC_REQUIRE_ISOLATION" doc:"Refuse exec jobs (the worker does not take the exec kind) unless each run gets a uid of its own (isolation uid or uid+namespace in /v1/stats). Off: a worker that cannot runs them with its own uid, and says so when it starts."`
	// Isolation caps the walls of exec runs: empty takes the strongest
	// the host allows.
	Isolation string `env:"SLUICE_WORKER_ISOLATION" doc:"How exec runs are walled off: uid+namespace (a uid and a mount namespace of their own), uid (a uid of their own, no namespace) or none (the worker's uid). Empty = the strongest the host allows; a weaker one is never replaced by a stronger one."`
	// MaxRunPids bounds the processes and threads of one exec run.
	MaxRunPids int64 `env:"SLUICE_WORKER_MAX_RUN_PIDS" envDefault:"1024" doc:"The most processes and threads one exec run may have at once (a fork bomb stops there): pids.max of its cgroup, else RLIMIT_NPROC of its own uid. 0 = no bound; else at least 16."`
	// Limits chooses how exec jobs are held to their resources: empty
	// takes the strongest the host allows.
	Limits string `env:"SLUICE_WORKER_LIMITS" doc:"How exec jobs are held to their resources: cgroup-v2, cgroup-v1, rlimit or none. Empty = the strongest the host allows (cgroup v2, then the cgroup v1 memory and cpu controllers, then rlimit); a weaker one is never replaced by a stronger one."`

	// Deprecated lists the former variable names found set, for the
	// binary to log (see envconfig.Deprecation).
	Deprecated []envconfig.Deprecation `env:"-" json:"-"`
}

// DefaultConfig is the configuration with every variable unset, with a
// generated worker id.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the worker's binary needs before it builds the worker:
// NATS and the logger (a worker has no store).
func (c Config) Common() service.Common {
	return service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.DataDir, Deprecated: c.Deprecated}
}

// Binary is the worker service as a process: its configuration from the
// environment, its dependencies from the common settings. The worker
// command runs it with service.Main, and so do tests that need a real
// worker process.
func Binary() service.Binary[Config] {
	return service.Binary[Config]{
		Name:   "worker",
		Load:   LoadConfig,
		Common: Config.Common,
		Build: func(cfg Config, d service.Deps) (service.Runner, error) {
			return New(cfg, Deps{NC: d.NC, JS: d.JS, Log: d.Log, Registry: d.Registry})
		},
	}
}

// LoadConfig reads the configuration from environ (the process environment
// when nil), fills defaults and validates it.
func LoadConfig(environ map[string]string) (Config, error) {
	var c Config
	deprecated, err := envconfig.Parse(&c, environ)
	if err != nil {
		return c, err
	}
	c.Deprecated = deprecated
	c = c.withDefaults()
	if err := envconfig.Explain(c.Validate(), deprecated); err != nil {
		return c, err
	}
	return c, nil
}

// withDefaults generates a worker id when none is set and cleans the
// lists. Every other default is an envDefault tag.
func (c Config) withDefaults() Config {
	c.WorkerID = strings.TrimSpace(c.WorkerID)
	if c.WorkerID == "" {
		c.WorkerID = GenerateWorkerID()
	}
	c.ExecAllow = cleanList(c.ExecAllow)
	c.ExecEnvAllow = cleanList(c.ExecEnvAllow)
	c.ExecDirs = cleanList(c.ExecDirs)
	c.FetchAllow = cleanList(c.FetchAllow)
	c.Kinds = cleanList(c.Kinds)
	if c.ScratchDir == "" {
		c.ScratchDir = filepath.Join(c.DataDir, "scratch")
	}
	if c.Version == "" {
		c.Version = contracts.Release
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(c.DataDir, "cache")
	}
	c.Memory = strings.TrimSpace(c.Memory)
	if c.CPU == 0 || c.Memory == "" {
		host := limit.Capacity()
		if c.CPU == 0 {
			c.CPU = host.CPU
		}
		if c.Memory == "" {
			c.Memory = contracts.FormatMemory(host.Memory)
		}
	}
	c.Limits = strings.TrimSpace(c.Limits)
	c.Isolation = strings.TrimSpace(c.Isolation)
	return c
}

// cleanList trims the entries and drops empty ones.
func cleanList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Validate checks the configuration; each error names its variable.
func (c Config) Validate() error {
	var p envconfig.Problems
	if !contracts.ValidWorkerID(c.WorkerID) {
		p.Add("SLUICE_WORKER_ID", "%q must be 1-64 letters, digits, '-' or '_'", c.WorkerID)
	}
	envconfig.NotNegative(&p, "SLUICE_WORKER_MAX_CONCURRENT_TASKS", c.MaxConcurrent, "no limit")
	envconfig.Positive(&p, "SLUICE_HEARTBEAT_INTERVAL", c.HeartbeatInterval)
	if c.StaleThreshold <= 2*c.HeartbeatInterval {
		p.Add("SLUICE_STALE_THRESHOLD", "%s must exceed twice SLUICE_HEARTBEAT_INTERVAL (%s)", c.StaleThreshold, c.HeartbeatInterval)
	}
	envconfig.NotNegative(&p, "SLUICE_WORKER_IDLE_TIMEOUT", c.IdleTimeout, "never")
	envconfig.NotNegative(&p, "SLUICE_WORKER_MAX_LIFETIME", c.MaxLifetime, "never")
	envconfig.Positive(&p, "SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	envconfig.Positive(&p, "SLUICE_WORKER_PROGRESS_INTERVAL", c.ProgressInterval)
	envconfig.Positive(&p, "SLUICE_WORKER_CLAIM_WAIT", c.ClaimWait)
	envconfig.Positive(&p, "SLUICE_WORKER_DELIVERY_GRACE", c.DeliveryGrace)
	envconfig.Positive(&p, "SLUICE_WORKER_EXEC_GRACE", c.ExecGrace)
	for _, k := range c.Kinds {
		if !kinds.Known(k) {
			p.Add("SLUICE_WORKER_KINDS", "%q is not a built-in kind (have %s)", k, strings.Join(kinds.Names(), ", "))
		}
	}
	for _, a := range c.ExecAllow {
		if strings.ContainsRune(a, 0) {
			p.Add("SLUICE_WORKER_EXEC_ALLOW", "%q contains a NUL byte", a)
		}
	}
	for _, k := range c.ExecEnvAllow {
		if !kinds.ValidEnvName(k) {
			p.Add("SLUICE_WORKER_EXEC_ENV_ALLOW", "%q is not a variable name", k)
		}
	}
	for _, d := range c.ExecDirs {
		if !filepath.IsAbs(d) {
			p.Add("SLUICE_WORKER_EXEC_DIRS", "%q must be an absolute path", d)
		}
	}
	envconfig.Positive(&p, "SLUICE_WORKER_MAX_CACHE_BYTES", c.MaxCacheBytes)
	if _, err := inputs.ParseAllow(c.FetchAllow); err != nil {
		p.Wrap(inputs.AllowVariable, err)
	}
	envconfig.Positive(&p, "SLUICE_WORKER_FETCH_TIMEOUT", c.FetchTimeout)
	envconfig.NotNegative(&p, "SLUICE_WORKER_MAX_SCRATCH_BYTES", c.MaxScratchBytes, "no bound")
	if iso := contracts.Isolation(c.Isolation); iso != "" && !iso.Valid() {
		p.Add("SLUICE_WORKER_ISOLATION", "%q is not one of %q", c.Isolation, contracts.Isolations)
	}
	if _, err := sandbox.ParseRange(c.RunUIDs); err != nil {
		p.Add("SLUICE_WORKER_RUN_UIDS", "%s", err)
	}
	if c.MaxRunPids < 0 || c.MaxRunPids > 0 && c.MaxRunPids < minRunPids {
		p.Add("SLUICE_WORKER_MAX_RUN_PIDS", "%d must be 0 (no bound) or at least %d", c.MaxRunPids, minRunPids)
	}
	c.validateResources(&p)
	p.Include(c.Bus.Validate())
	return p.Err()
}

// GenerateWorkerID returns the sanitized hostname plus "-" and six random
// hex digits, a valid worker id.
func GenerateWorkerID() string {
	host, err := os.Hostname()
	if err != nil {
		host = ""
	}
	return workerID(host, randomSuffix())
}

// workerID builds an id from a hostname and a suffix: characters a subject
// token cannot hold become '-', and the host part is cut so the whole id
// stays within 64 characters.
func workerID(host, suffix string) string {
	var b strings.Builder
	for _, r := range host {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "worker"
	}
	if limit := 64 - len(suffix) - 1; len(name) > limit {
		name = strings.TrimRight(name[:limit], "-")
	}
	return name + "-" + suffix
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
