package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configure an in-process NATS server.
type EmbeddedOptions struct {
	// Dir holds JetStream's files; it is created if missing.
	Dir string
	// Listen is host:port for client connections; port 0 picks a free one.
	// Empty means "127.0.0.1:0".
	Listen string
	// NoListen serves in-process connections only.
	NoListen bool
	// ServerName names the server in logs and monitoring.
	ServerName string
	// ConfigFile, when set, is loaded first (accounts, permissions); the
	// fields above override its listen address and store directory.
	ConfigFile string
	// StartTimeout bounds the wait for the server to accept connections.
	StartTimeout time.Duration
	// Auth, when set, closes the server to anonymous clients (token mode).
	Auth *EmbeddedAuth
	// Cluster, when set, makes the server one node of a NATS cluster
	// (ServerName must then be unique in the cluster).
	Cluster *ClusterOptions
	// Standalone drops the cluster ConfigFile sets up: the server runs
	// alone (for tests of a node's configuration).
	Standalone bool
	// MaxPayload, when above the server's default (1 MiB), is the largest
	// message a client may publish (max_payload): what the gateway's
	// largest request needs (at most server.MAX_PAYLOAD_MAX_SIZE).
	MaxPayload int32
}

// ClusterOptions join an embedded server to a cluster.
type ClusterOptions struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is host:port for the other nodes' routes.
	Listen string
	// Routes are the other nodes' route URLs (nats-route://host:port);
	// listing this node too is harmless. They replace the config file's.
	Routes []string
}

// StartEmbedded starts a NATS server with JetStream (file storage) in this
// process and waits until it accepts connections. Shut it down with
// Shutdown and WaitForShutdown.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	if o.Dir == "" {
		return nil, errors.New("embedded nats: Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: create dir: %w", err)
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		loaded, err := server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: config %s: %w", o.ConfigFile, err)
		}
		opts = loaded
	}
	opts.ServerName = o.ServerName
	if opts.ServerName == "" {
		opts.ServerName = "sluice-embedded"
	}
	opts.JetStream = true
	opts.StoreDir = filepath.Join(o.Dir, "jetstream")
	opts.NoSigs = true
	opts.NoLog = true
	opts.DontListen = o.NoListen
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	if o.Listen != "" {
		host, port, err := splitListen(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen %q: %w", o.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	if o.Auth != nil {
		opts.CustomClientAuthentication = o.Auth
	}
	if o.MaxPayload > max(opts.MaxPayload, server.MAX_PAYLOAD_SIZE) {
		opts.MaxPayload = o.MaxPayload
		// A connection's pending bytes must hold at least one message.
		opts.MaxPending = max(opts.MaxPending, server.MAX_PENDING_SIZE, 2*int64(o.MaxPayload))
	}
	if o.Standalone {
		opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
	}
	if c := o.Cluster; c != nil {
		host, port, err := splitListen(c.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: cluster listen %q: %w", c.Listen, err)
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = c.Name, host, port
		opts.Routes = nil
		if len(c.Routes) > 0 {
			opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	wait := o.StartTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after %s", wait)
	}
	return ns, nil
}

// splitListen parses host:port; port 0 picks a free one.
func splitListen(listen string) (string, int, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, errors.New("bad port")
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	return host, p, nil
}
