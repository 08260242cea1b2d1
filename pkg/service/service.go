package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/pkg/store"
)

// Runner is a built service: it runs until ctx ends, then drains.
type Runner interface {
	Run(ctx context.Context) error
}

// Common is the part of a service's configuration that its binary needs
// before it can build the service.
type Common struct {
	// Bus is the NATS connection; an empty URL embeds a server.
	Bus bus.Env
	// Log is the logger's level and format.
	Log observe.Env
	// OpenStore, when not nil, opens the store before the service is
	// built, calling retry before each new try while the store is down
	// (dial.OpenRetry does that); nil for a service without a store (the
	// worker, which then links no store driver).
	OpenStore func(ctx context.Context, retry func(err error, next time.Duration)) (store.Store, error)
	// DataDir holds the embedded NATS server's files when Bus.URL is empty.
	DataDir string
	// TokenAuth, when not nil, closes an embedded NATS server to clients
	// without an API token it resolves (the gateway in token mode).
	TokenAuth func(token string) (tenant string, ok bool)
	// MaxPayload, when not 0, is an embedded NATS server's max_payload
	// (the gateway's largest request).
	MaxPayload int32
	// Deprecated are the former variable names the configuration was read
	// with: Run logs a warning for each, naming the new variable.
	Deprecated []envconfig.Deprecation
}

// Deps are what Main opened for the service: its dependencies.
type Deps struct {
	// Store is the job store; nil when Common.OpenStore was nil.
	Store store.Store
	// NC and JS are the NATS connection and its JetStream context.
	NC *nats.Conn
	JS jetstream.JetStream
	// Log is the service's logger.
	Log zerolog.Logger
	// Registry takes the service's metrics: the Go and process collectors
	// are on it already.
	Registry *prometheus.Registry
}

// Binary describes one service binary.
type Binary[C any] struct {
	// Name is the service's name in logs, errors and NATS client names.
	Name string
	// Load parses the configuration from environ (the process environment
	// when nil), fills defaults and validates it.
	Load func(environ map[string]string) (C, error)
	// Common picks the shared settings out of the configuration.
	Common func(C) Common
	// Build wires the service from its configuration and dependencies.
	Build func(C, Deps) (Runner, error)
}

// Main runs b until SIGINT or SIGTERM and exits the process: status 0 after
// a clean stop, 1 with the error on stderr otherwise. The process runs
// with a soft memory limit of DefaultMemoryLimit unless GOMEMLIMIT is set.
func Main[C any](b Binary[C]) {
	applyMemoryLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, b, nil, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", b.Name, err)
		os.Exit(1)
	}
}

// Run is Main without the process: it loads the configuration from
// environ (the process environment when nil), logs to logOut, opens the
// dependencies, builds the service and runs it until ctx ends. It closes
// everything it opened before it returns.
func Run[C any](ctx context.Context, b Binary[C], environ map[string]string, logOut io.Writer) error {
	if b.Name == "" || b.Load == nil || b.Common == nil || b.Build == nil {
		return errors.New("service: Binary needs a Name, Load, Common and Build")
	}
	cfg, err := b.Load(environ)
	if err != nil {
		return err
	}
	common := b.Common(cfg)
	log := observe.NewLogger(b.Name, logOut, common.Log.LogLevel, common.Log.LogFormat)
	LogDeprecations(log, common.Deprecated)
	deps := Deps{Log: log, Registry: observe.NewRegistry()}
	if common.OpenStore != nil {
		st, err := common.OpenStore(ctx, func(err error, next time.Duration) {
			log.Warn().Err(err).Dur("retry_in", next).Msg("store unavailable")
		})
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		deps.Store = st
		if err := RegisterStoreWrites(deps.Registry, st); err != nil {
			return fmt.Errorf("register the store's write counts: %w", err)
		}
	}
	var dial []bus.DialOption
	if common.MaxPayload > 0 {
		dial = append(dial, bus.WithMaxPayload(common.MaxPayload))
	}
	if common.TokenAuth != nil {
		dial = append(dial, bus.WithTokenAuth(common.TokenAuth))
	}
	link, err := bus.Dial(ctx, common.Bus, common.DataDir, "sluice-"+b.Name, LogNotices(log), dial...)
	if err != nil {
		return err
	}
	defer func() { _ = link.Close() }()
	deps.NC, deps.JS = link.Conn, link.JS
	svc, err := b.Build(cfg, deps)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}

// LogDeprecations logs a warning for each former variable name the
// configuration was read with, naming the variable that replaces it.
func LogDeprecations(log zerolog.Logger, deprecated []envconfig.Deprecation) {
	for _, d := range deprecated {
		log.Warn().Str("variable", d.Old).Str("use", d.New).Bool("ignored", d.Ignored).Msg(d.Message())
	}
}

// LogNotices logs what a NATS connection goes through: the edge where a
// service logs the notices of pkg/bus, which logs nothing itself.
func LogNotices(log zerolog.Logger) bus.Notify {
	return func(n bus.Notice) {
		var ev *zerolog.Event
		switch n.Kind {
		case bus.NoticeReconnected, bus.NoticeEmbeddedStarted:
			ev = log.Info()
		default:
			ev = log.Warn()
		}
		if n.Err != nil {
			ev = ev.Err(n.Err)
		}
		if n.URL != "" {
			ev = ev.Str("url", n.URL)
		}
		if n.Subject != "" {
			ev = ev.Str(observe.FieldSubject, n.Subject)
		}
		if n.RetryIn > 0 {
			ev = ev.Dur("retry_in", n.RetryIn)
		}
		ev.Msg("nats " + strings.ReplaceAll(n.Kind, "_", " "))
	}
}
