package observe

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Log field names used across services: the API's names. FieldAttempt is
// a job's run number (contracts.Job.Attempt), FieldClaim its fencing
// counter (contracts.Job.Claim), which heartbeats, results and requeues
// carry.
const (
	FieldJobID    = "job_id"
	FieldWorkerID = "worker_id"
	FieldAttempt  = "attempt"
	FieldClaim    = "claim"
	FieldSubject  = "subject"
	FieldTenant   = "tenant"
)

// NewLogger returns a JSON logger for a service writing to w (stderr when
// nil), at the level named by SLUICE_LOG_LEVEL-style text ("debug", "info",
// "warn", "error"; default info). When SLUICE_LOG_FORMAT is "console" the
// output is human-readable instead.
func NewLogger(service string, w io.Writer, level, format string) zerolog.Logger {
	if w == nil {
		w = os.Stderr
	}
	if strings.EqualFold(format, "console") {
		f, isFile := w.(*os.File)
		color := isFile && isatty.IsTerminal(f.Fd())
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !color}
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", service).Logger()
}

// Env is the logging part of every service's configuration.
type Env struct {
	// LogLevel is debug, info, warn or error.
	LogLevel string `env:"SLUICE_LOG_LEVEL" envDefault:"info" doc:"debug, info, warn or error."`
	// LogFormat is json (default) or console.
	LogFormat string `env:"SLUICE_LOG_FORMAT" envDefault:"json" doc:"json, or console for people."`
}
