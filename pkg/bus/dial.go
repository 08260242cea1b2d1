package bus

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is the NATS part of every service's configuration.
type Env struct {
	// URL of the NATS server; empty runs an embedded server in this process.
	URL string `env:"SLUICE_NATS_URL" doc:"The NATS server(s), comma-separated nats:// URLs. Empty runs an embedded server in the process (one node, its files under SLUICE_DATA_DIR)."`
	// Listen is where an embedded server accepts clients ("" = loopback, any free port).
	Listen string `env:"SLUICE_NATS_LISTEN" doc:"Where an embedded NATS server accepts outside clients (host:port). Empty = loopback, any free port."`
	// User and Password authenticate against a secured server.
	User     string `env:"SLUICE_NATS_USER" doc:"The user the service connects to a secured NATS server as."`
	Password string `env:"SLUICE_NATS_PASSWORD" doc:"The password of SLUICE_NATS_USER. Secret."`
	// StreamReplicas is how many servers of a NATS cluster hold each
	// stream this service creates (the job and event streams): 3 in a
	// 3-node cluster. The embedded server is one node: 1.
	StreamReplicas int `env:"SLUICE_STREAM_REPLICAS" envDefault:"1" doc:"How many servers of a NATS cluster hold each stream the service creates (the job and event streams): 3 in a 3-node cluster; the embedded server is one node: 1."`
}

// MaxStreamReplicas is the most replicas JetStream keeps of a stream.
const MaxStreamReplicas = 5

// Validate checks the settings, naming the variable at fault.
func (e Env) Validate() error {
	switch {
	case e.StreamReplicas < 1 || e.StreamReplicas > MaxStreamReplicas:
		return fmt.Errorf("SLUICE_STREAM_REPLICAS: must be between 1 and %d, got %d", MaxStreamReplicas, e.StreamReplicas)
	case e.StreamReplicas > 1 && e.URL == "":
		return fmt.Errorf("SLUICE_STREAM_REPLICAS: %d replicas need a NATS cluster (SLUICE_NATS_URL); the embedded server is one node", e.StreamReplicas)
	}
	return nil
}

// Link is an open NATS connection, its JetStream context and, when the
// service embeds the server, that server.
type Link struct {
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Embedded *server.Server
}

// DialOption changes how Dial starts an embedded server.
type DialOption func(*dialOptions)

type dialOptions struct {
	tenant     func(token string) (string, bool)
	maxPayload int32
}

// WithMaxPayload raises an embedded server's max_payload to n bytes (see
// EmbeddedOptions.MaxPayload). It changes nothing for an outside server.
func WithMaxPayload(n int32) DialOption {
	return func(o *dialOptions) { o.maxPayload = n }
}

// WithTokenAuth closes an embedded server to anonymous clients (token
// mode): outside clients authenticate with an API token that tenant
// resolves (see EmbeddedAuth). It changes nothing for an outside server.
func WithTokenAuth(tenant func(token string) (string, bool)) DialOption {
	return func(o *dialOptions) { o.tenant = tenant }
}

// Dial connects as described by env. With an empty URL it starts an
// embedded server storing JetStream under dataDir/nats and connects to it in
// process. Close the Link when done.
func Dial(ctx context.Context, env Env, dataDir, name string, notify Notify, options ...DialOption) (*Link, error) {
	var do dialOptions
	for _, o := range options {
		o(&do)
	}
	l := &Link{}
	opts := ConnectOptions{URL: env.URL, Name: name, User: env.User, Password: env.Password, Notify: notify}
	if env.URL == "" {
		eo := EmbeddedOptions{Dir: filepath.Join(dataDir, "nats"), Listen: env.Listen, ServerName: name, MaxPayload: do.maxPayload}
		if do.tenant != nil {
			pw, err := NewInternalPassword()
			if err != nil {
				return nil, err
			}
			eo.Auth = &EmbeddedAuth{InternalPassword: pw, Tenant: do.tenant}
			opts.User, opts.Password = InternalUser, pw
		}
		ns, err := StartEmbedded(eo)
		if err != nil {
			return nil, err
		}
		l.Embedded = ns
		opts.InProcess = ns
		notify.send(Notice{Kind: NoticeEmbeddedStarted, URL: ns.ClientURL()})
	}
	nc, err := Connect(ctx, opts)
	if err != nil {
		l.Close()
		return nil, err
	}
	l.Conn = nc
	js, err := jetstream.New(nc)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	l.JS = WithReplicas(js, env.StreamReplicas)
	return l, nil
}

// Close drains the connection and stops an embedded server.
func (l *Link) Close() error {
	var errs []error
	if l.Conn != nil {
		if err := l.Conn.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	if l.Embedded != nil {
		l.Embedded.Shutdown()
		l.Embedded.WaitForShutdown()
	}
	return errors.Join(errs...)
}
