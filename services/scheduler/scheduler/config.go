package scheduler

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/service"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
	"github.com/sluicehq/sluice/services/scheduler/internal/spawn"
)

// Config is everything the scheduler reads from the environment.
type Config struct {
	// Bus, Store and Log are the settings every service shares.
	Bus   bus.Env
	Store dial.Env
	Log   observe.Env

	// ReofferInterval is how long a job whose offers all failed waits
	// before it is ready again (plus up to 25% jitter), and how often the
	// dispatcher looks for ready jobs when nothing woke it.
	ReofferInterval time.Duration `env:"SLUICE_RETRY_INTERVAL" envDefault:"2s" doc:"How long a job its worker refused waits before it is offered again (plus up to 25% jitter); also how often the scheduler looks for ready jobs when nothing woke it."`
	// RetryBackoff is the wait before a failed job's second run; it doubles
	// with every run (±50% jitter) up to MaxRetryBackoff.
	RetryBackoff time.Duration `env:"SLUICE_SCHEDULER_RETRY_BACKOFF" envOld:"SLUICE_RETRY_BACKOFF" envDefault:"1s" doc:"The wait before a failed job's second run; it doubles with every run (±50% jitter) up to SLUICE_SCHEDULER_MAX_RETRY_BACKOFF."`
	// MaxRetryBackoff bounds the wait between two runs of a failed job.
	MaxRetryBackoff time.Duration `env:"SLUICE_SCHEDULER_MAX_RETRY_BACKOFF" envOld:"SLUICE_RETRY_BACKOFF_MAX" envDefault:"10m" doc:"The longest wait between two runs of a failed job."`
	// StaleThreshold is the heartbeat age that makes a running job stale.
	StaleThreshold time.Duration `env:"SLUICE_STALE_THRESHOLD" envDefault:"30s" doc:"The heartbeat age that makes a running job stale: the schedulers and the reaper give its run up, and a worker stops a run whose heartbeats went unacknowledged for 2/3 of it. Must exceed twice SLUICE_HEARTBEAT_INTERVAL."`
	// HeartbeatInterval is how often workers heartbeat; the lease renew
	// point is checked against it.
	HeartbeatInterval time.Duration `env:"SLUICE_HEARTBEAT_INTERVAL" envDefault:"5s" doc:"How often the worker renews the leases of its running jobs and announces itself."`
	// LeaseRenewAfter is the age of a stored heartbeat at which a worker's
	// heartbeat writes its lease again; 0 = the default (see RenewAfter).
	LeaseRenewAfter time.Duration `env:"SLUICE_SCHEDULER_LEASE_RENEW_AFTER" envDefault:"0s" doc:"The age of a running job's stored heartbeat at which a worker's heartbeat writes it again; a heartbeat that finds a younger one is answered from a read and writes nothing. At most SLUICE_STALE_THRESHOLD minus twice SLUICE_HEARTBEAT_INTERVAL, so a live lease is written again at least one heartbeat before it would be stale. 0 = 2/3 of SLUICE_STALE_THRESHOLD, or that bound when it is lower."`
	// ProgressFlush is how often the newest progress report of each
	// running job is written to the store; 0 = every report.
	ProgressFlush time.Duration `env:"SLUICE_SCHEDULER_PROGRESS_FLUSH" envDefault:"5s" doc:"How often a scheduler writes the newest progress report of each running job to the store (at most one write per job per period, many jobs per write); a job's last report is written with its result. Progress events are published as reports come, so the store's progress of a running job (GET /v1/jobs/{id}) is at most this old. 0 = write every report as it comes."`
	// MaxRuntime fails a job running longer than this; 0 = no limit.
	MaxRuntime time.Duration `env:"SLUICE_MAX_RUNTIME" envDefault:"0s" doc:"The longest any run may take: the gateway bounds a job's max_runtime by it, the schedulers and the reaper fail a run past it, whatever the job asked. 0 = no bound."`
	// OfferTimeout bounds one offer request to one worker.
	OfferTimeout time.Duration `env:"SLUICE_SCHEDULER_OFFER_TIMEOUT" envOld:"SLUICE_OFFER_TIMEOUT" envDefault:"1s" doc:"How long the scheduler waits for a worker's answer to one offer."`
	// ClaimTTL is no longer used: a claim starts its job on a worker slot.
	ClaimTTL time.Duration `env:"SLUICE_SCHEDULER_CLAIM_TTL" envOld:"SLUICE_CLAIM_TTL" envDefault:"30s" doc:"No longer used, still accepted: a claim now starts its job on a worker slot; a job its worker answers busy or refuses goes back to pending at once, one whose answer is lost (or whose scheduler died) is requeued at SLUICE_STALE_THRESHOLD unless its worker confirms it."`
	// AckWait is JetStream's redelivery timer for an unacknowledged message.
	AckWait time.Duration `env:"SLUICE_SCHEDULER_ACK_WAIT" envOld:"SLUICE_ACK_WAIT" envDefault:"30s" doc:"How long JetStream waits before it delivers an unacknowledged message (a due job, a result) again."`
	// MaxConcurrent is how many due messages and results one scheduler
	// handles at once, and how many offers it has in flight.
	MaxConcurrent int `env:"SLUICE_SCHEDULER_MAX_CONCURRENT" envOld:"SLUICE_SCHEDULER_CONCURRENCY" envDefault:"64" doc:"The most due jobs and results one scheduler handles at once, and the most offers it has in flight (1 to 4096)."`
	// NoWorkerGrace fails a pending job early, with "capacity: no worker
	// runs kind …", when no live worker has announced its kind for this
	// long (counted from the scheduler's start at the earliest); 0 = wait
	// for the dispatch deadline.
	NoWorkerGrace time.Duration `env:"SLUICE_SCHEDULER_NO_WORKER_GRACE" envOld:"SLUICE_NO_WORKER_GRACE" envDefault:"1m" doc:"A pending job fails early (capacity: no worker runs kind …) when no live worker has announced its kind for this long, counted from the scheduler's start at the earliest. 0 = wait for the dispatch deadline."`
	// Spawn is what a scale request does besides being published on
	// sluice.scale.request: "command" runs SpawnCommand, "dev" leaves it
	// to sluice dev (which starts a worker), empty does nothing more.
	Spawn string `env:"SLUICE_SCHEDULER_SPAWN" envOld:"SLUICE_SPAWN" doc:"What a scale request does besides being published on sluice.scale.request: command runs SLUICE_SCHEDULER_SPAWN_COMMAND, dev leaves it to sluice dev (which starts a worker), empty does nothing more."`
	// SpawnCommand is the argv (split on spaces) run per scale request
	// when Spawn is "command".
	SpawnCommand []string `env:"SLUICE_SCHEDULER_SPAWN_COMMAND" envOld:"SLUICE_SPAWN_COMMAND" envSeparator:" " doc:"The command (split on spaces) run per scale request when SLUICE_SCHEDULER_SPAWN is command; it finds the request in SLUICE_SCALE_KIND, SLUICE_SCALE_READY and SLUICE_SCALE_OLDEST_WAIT_MS."`
	// SpawnCooldown is the least time between two scale requests of a kind.
	SpawnCooldown time.Duration `env:"SLUICE_SCHEDULER_SPAWN_COOLDOWN" envOld:"SLUICE_SPAWN_COOLDOWN" envDefault:"10s" doc:"The least time between two scale requests of one kind."`
	// MaxSpawned bounds the spawned workers live or asked for; 0 = no
	// scale requests at all.
	MaxSpawned int `env:"SLUICE_SCHEDULER_MAX_SPAWNED" envOld:"SLUICE_SPAWN_MAX" envDefault:"4" doc:"The most spawned workers live or asked for; 0 = no scale requests at all."`
	// SpawnTimeout bounds one run of SpawnCommand.
	SpawnTimeout time.Duration `env:"SLUICE_SCHEDULER_SPAWN_TIMEOUT" envOld:"SLUICE_SPAWN_TIMEOUT" envDefault:"30s" doc:"The longest one run of SLUICE_SCHEDULER_SPAWN_COMMAND may take."`
	// MinWorkerVersion makes the scheduler skip workers that announce an
	// older version (contracts.CompareVersions); empty = none skipped.
	MinWorkerVersion string `env:"SLUICE_SCHEDULER_MIN_WORKER_VERSION" envOld:"SLUICE_MIN_WORKER_VERSION" doc:"Workers that announce an older release version (SLUICE_WORKER_VERSION) are offered no job, so an upgrade can retire the old ones. Empty = none skipped."`
	// HTTPAddr serves /healthz, /readyz and /metrics; empty = none.
	HTTPAddr string `env:"SLUICE_SCHEDULER_HTTP_ADDR" doc:"Where the scheduler serves /healthz, /readyz and /metrics (host:port). Empty = not served."`
	// ShutdownTimeout bounds the drain on shutdown: offers, results and
	// heartbeats in flight when it begins may finish within it.
	ShutdownTimeout time.Duration `env:"SLUICE_SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"How long a stopping service (SIGINT, SIGTERM) lets the work in flight finish: requests, offers, results, running handlers, a sweep. What is still running then is cancelled (a worker's jobs go back to the queue)."`

	// Deprecated lists the former variable names found set, for the
	// binary to log (see envconfig.Deprecation).
	Deprecated []envconfig.Deprecation `env:"-" json:"-"`
}

// DefaultConfig is the configuration with every variable unset.
func DefaultConfig() Config {
	return envconfig.Must(LoadConfig(map[string]string{}))
}

// Common is what the scheduler's binary needs before it builds the
// scheduler: NATS, the logger and the store.
func (c Config) Common() service.Common {
	return service.Common{Bus: c.Bus, Log: c.Log, DataDir: c.Store.DataDir, Deprecated: c.Deprecated,
		OpenStore: func(ctx context.Context, retry func(error, time.Duration)) (store.Store, error) {
			return dial.OpenRetry(ctx, c.Store, retry)
		}}
}

// LoadConfig parses the environment (the process's when environ is nil),
// fills defaults and validates.
func LoadConfig(environ map[string]string) (Config, error) {
	var c Config
	deprecated, err := envconfig.Parse(&c, environ)
	if err != nil {
		return c, err
	}
	c.Deprecated = deprecated
	return c, envconfig.Explain(c.Validate(), deprecated)
}

// RenewAfter is the lease renew point in effect: LeaseRenewAfter, or when
// it is 0, 2/3 of StaleThreshold but at most StaleThreshold minus twice
// HeartbeatInterval.
func (c Config) RenewAfter() time.Duration {
	if c.LeaseRenewAfter != 0 {
		return c.LeaseRenewAfter
	}
	return min(c.StaleThreshold*2/3, c.StaleThreshold-2*c.HeartbeatInterval)
}

// Validate checks the settings and names the variable at fault.
func (c Config) Validate() error {
	var p envconfig.Problems
	envconfig.Positive(&p, "SLUICE_RETRY_INTERVAL", c.ReofferInterval)
	envconfig.Positive(&p, "SLUICE_STALE_THRESHOLD", c.StaleThreshold)
	envconfig.Positive(&p, "SLUICE_HEARTBEAT_INTERVAL", c.HeartbeatInterval)
	envconfig.NotNegative(&p, "SLUICE_SCHEDULER_LEASE_RENEW_AFTER", c.LeaseRenewAfter, "2/3 of SLUICE_STALE_THRESHOLD")
	if c.StaleThreshold > 0 && c.HeartbeatInterval > 0 {
		if c.StaleThreshold <= 2*c.HeartbeatInterval {
			p.Add("SLUICE_STALE_THRESHOLD", "%s must exceed twice SLUICE_HEARTBEAT_INTERVAL (%s)", c.StaleThreshold, c.HeartbeatInterval)
		} else if c.LeaseRenewAfter > 0 && c.LeaseRenewAfter+2*c.HeartbeatInterval > c.StaleThreshold {
			p.Add("SLUICE_SCHEDULER_LEASE_RENEW_AFTER", "%s plus twice SLUICE_HEARTBEAT_INTERVAL (%s) exceeds SLUICE_STALE_THRESHOLD (%s): a live lease would be renewed too late and found stale",
				c.LeaseRenewAfter, c.HeartbeatInterval, c.StaleThreshold)
		}
	}
	envconfig.NotNegative(&p, "SLUICE_SCHEDULER_PROGRESS_FLUSH", c.ProgressFlush, "write every report")
	envconfig.Positive(&p, "SLUICE_SCHEDULER_OFFER_TIMEOUT", c.OfferTimeout)
	envconfig.Positive(&p, "SLUICE_SCHEDULER_CLAIM_TTL", c.ClaimTTL)
	envconfig.Positive(&p, "SLUICE_SCHEDULER_ACK_WAIT", c.AckWait)
	envconfig.Positive(&p, "SLUICE_SCHEDULER_RETRY_BACKOFF", c.RetryBackoff)
	envconfig.Positive(&p, "SLUICE_SCHEDULER_MAX_RETRY_BACKOFF", c.MaxRetryBackoff)
	if c.RetryBackoff > 0 && c.MaxRetryBackoff > 0 && c.MaxRetryBackoff < c.RetryBackoff {
		p.Add("SLUICE_SCHEDULER_MAX_RETRY_BACKOFF", "%s is less than SLUICE_SCHEDULER_RETRY_BACKOFF (%s)", c.MaxRetryBackoff, c.RetryBackoff)
	}
	envconfig.Positive(&p, "SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	envconfig.NotNegative(&p, "SLUICE_SCHEDULER_NO_WORKER_GRACE", c.NoWorkerGrace, "off")
	envconfig.NotNegative(&p, "SLUICE_MAX_RUNTIME", c.MaxRuntime, "no bound")
	switch c.Spawn {
	case spawn.ModePublish, spawn.ModeDev:
	case spawn.ModeCommand:
		if len(c.SpawnCommand) == 0 {
			p.Add("SLUICE_SCHEDULER_SPAWN_COMMAND", "required with SLUICE_SCHEDULER_SPAWN=command")
		}
	default:
		p.Add("SLUICE_SCHEDULER_SPAWN", "%q is not command, dev or empty", c.Spawn)
	}
	envconfig.NotNegative(&p, "SLUICE_SCHEDULER_MAX_SPAWNED", c.MaxSpawned, "off")
	envconfig.NotNegative(&p, "SLUICE_SCHEDULER_SPAWN_COOLDOWN", c.SpawnCooldown, "none")
	envconfig.Positive(&p, "SLUICE_SCHEDULER_SPAWN_TIMEOUT", c.SpawnTimeout)
	envconfig.Between(&p, "SLUICE_SCHEDULER_MAX_CONCURRENT", c.MaxConcurrent, 1, 4096)
	p.Include(c.Store.Validate())
	p.Include(c.Bus.Validate())
	return p.Err()
}
