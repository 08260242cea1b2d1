// Package compose holds the checks of the Docker Compose deployment: the
// build machines have no Docker engine, so compose.yaml, nats.conf and the
// Dockerfile are validated here, against the services' own configuration
// types and a real NATS server running nats.conf.
package compose

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
	"github.com/sluicehq/sluice/services/worker/worker"
)

const (
	composeFile = "compose.yaml"
	natsConf    = "nats.conf"
	dockerfile  = "Dockerfile"
	mongoStore  = "mongodb://mongo:27017/sluice?replicaSet=rs0"
	natsURL     = "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"
)

// sluiceServices maps each Sluice service of compose.yaml to its binary
// (services/<binary>), its Config type, its replica count and whether it
// uses the store. Each worker is a service of its own: its NATS user may
// use its own worker id's subjects alone.
var sluiceServices = map[string]struct {
	binary   string
	config   any
	replicas int
	store    bool
}{
	"gateway":   {"gateway", gateway.Config{}, 1, true},
	"scheduler": {"scheduler", scheduler.Config{}, 2, true},
	"worker-1":  {"worker", worker.Config{}, 1, false},
	"worker-2":  {"worker", worker.Config{}, 1, false},
	"worker-3":  {"worker", worker.Config{}, 1, false},
	"reaper":    {"reaper", reaper.Config{}, 1, true},
}

// workers are the worker services of compose.yaml; each one's NATS user
// and worker id are its name.
var workers = []string{"worker-1", "worker-2", "worker-3"}

// natsNodes are the NATS cluster's services.
var natsNodes = []string{"nats-1", "nats-2", "nats-3"}

// natsUsers are the users of nats.conf: one per service (one per worker),
// plus "client" for callers of the NATS API.
var natsUsers = []string{"gateway", "scheduler", "worker-1", "worker-2", "worker-3", "reaper", "client"}

// passwordVar is the variable nats.conf reads user's password from:
// NATS_<USER>_PASSWORD, upper case, '-' written '_'.
func passwordVar(user string) string {
	return "NATS_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// defaultProject is compose.yaml loaded with an empty environment, so
// every ${VAR:-default} takes its default; loaded once by TestMain.
var defaultProject *types.Project

// TestMain loads compose.yaml and exports the NATS container's environment
// (the NATS_*_PASSWORD variables nats.conf reads) into this process, so the
// NATS tests run nats.conf exactly as the container does.
func TestMain(m *testing.M) {
	p, err := loadProject(context.Background(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load", composeFile+":", err)
		os.Exit(1)
	}
	defaultProject = p
	if nats, ok := p.Services[natsNodes[0]]; ok {
		for k, v := range nats.Environment {
			if v != nil {
				_ = os.Setenv(k, *v)
			}
		}
	}
	os.Exit(m.Run())
}

// loadProject loads compose.yaml with env as the only interpolation
// environment (never the process's).
func loadProject(ctx context.Context, env map[string]string) (*types.Project, error) {
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{composeFile},
		cli.WithWorkingDirectory("."),
		cli.WithEnv(kv),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// envVars returns every variable a Config type reads: the env tags of its
// fields, nested and embedded structs included.
func envVars(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" && name != "-" {
			out[name] = true
		}
		// A former name (envOld) is read too, for one release.
		for old := range strings.SplitSeq(f.Tag.Get("envOld"), ",") {
			if old = strings.TrimSpace(old); old != "" {
				out[old] = true
			}
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			maps.Copy(out, envVars(ft))
		}
	}
	return out
}

func environment(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

func TestEnvVarsReflectsTheConfigs(t *testing.T) {
	t.Parallel()
	// Spot checks that the reflection walks embedded and nested structs.
	w := envVars(reflect.TypeFor[worker.Config]())
	for _, v := range []string{"SLUICE_NATS_URL", "SLUICE_NATS_PASSWORD", "SLUICE_LOG_LEVEL", "SLUICE_WORKER_ID", "SLUICE_WORKER_HTTP_ADDR"} {
		require.True(t, w[v], v)
	}
	require.False(t, w["SLUICE_STORE"], "workers need no database")
	g := envVars(reflect.TypeFor[gateway.Config]())
	for _, v := range []string{"SLUICE_STORE", "SLUICE_DATA_DIR", "SLUICE_NATS_USER", "SLUICE_HTTP_ADDR", "SLUICE_API_TOKENS"} {
		require.True(t, g[v], v)
	}
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := defaultProject
	require.Equal(t, "sluice", p.Name)
	want := []string{"gateway", "mongo", "nats-1", "nats-2", "nats-3", "reaper", "scheduler", "worker-1", "worker-2", "worker-3"}
	require.Equal(t, want, slices.Sorted(maps.Keys(p.Services)))

	for name, svc := range sluiceServices {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := p.Services[name]
			require.Equal(t, svc.replicas, s.GetScale(), "replicas")
			require.Equal(t, types.ShellCommand{"/usr/local/bin/" + svc.binary}, s.Command)
			require.NotNil(t, s.Build, "built from deploy/compose/Dockerfile")
			require.Equal(t, "deploy/compose/Dockerfile", filepath.ToSlash(s.Build.Dockerfile))
			abs, err := filepath.Abs("../..")
			require.NoError(t, err)
			require.Equal(t, abs, s.Build.Context, "the build context is the repository root")
			require.Equal(t, "65532:65532", s.User, "non-root")
			require.True(t, s.ReadOnly, "read-only root file system")
			require.Equal(t, "unless-stopped", s.Restart)
			require.NotNil(t, s.StopGracePeriod)
			require.Greater(t, *s.StopGracePeriod, types.Duration(gateway.DefaultConfig().ShutdownTimeout),
				"stop_grace_period must exceed SLUICE_SHUTDOWN_TIMEOUT")

			// Every SLUICE_* variable set is one this service reads.
			reads := envVars(reflect.TypeOf(svc.config))
			env := environment(s)
			for k := range s.Environment {
				require.True(t, strings.HasPrefix(k, "SLUICE_"), "%s sets %s", name, k)
				require.True(t, reads[k], "%s sets %s, which it does not read", name, k)
			}
			require.Equal(t, natsURL, env["SLUICE_NATS_URL"])
			require.Equal(t, name, env["SLUICE_NATS_USER"], "one NATS user per service")
			require.NotEmpty(t, env["SLUICE_NATS_PASSWORD"])
			require.Equal(t, environment(p.Services[natsNodes[0]])[passwordVar(name)],
				env["SLUICE_NATS_PASSWORD"], "the password NATS expects")
			if svc.binary == "worker" {
				require.Equal(t, name, env["SLUICE_WORKER_ID"], "a fixed worker id, its NATS user's")
			}
			if svc.store {
				require.Equal(t, mongoStore, env["SLUICE_STORE"])
			}

			// The service accepts this environment as it is.
			var lerr error
			switch svc.binary {
			case "gateway":
				_, lerr = gateway.LoadConfig(env)
			case "scheduler":
				_, lerr = scheduler.LoadConfig(env)
			case "worker":
				_, lerr = worker.LoadConfig(env)
			case "reaper":
				_, lerr = reaper.LoadConfig(env)
			}
			require.NoError(t, lerr)

			// Started after NATS (and MongoDB, when it uses the store) are healthy.
			require.Equal(t, "3", env["SLUICE_STREAM_REPLICAS"], "streams on every node of the cluster")
			deps := map[string]string{}
			for _, n := range natsNodes {
				deps[n] = types.ServiceConditionHealthy
			}
			if svc.store {
				deps["mongo"] = types.ServiceConditionHealthy
			}
			got := map[string]string{}
			for dep, d := range s.DependsOn {
				got[dep] = d.Condition
			}
			require.Equal(t, deps, got, "depends_on")

			// A health check through the image's probe, on the service's own port.
			require.NotNil(t, s.HealthCheck)
			require.Equal(t, "/usr/local/bin/healthprobe", s.HealthCheck.Test[1])
			port := "9090"
			addrVar := "SLUICE_" + strings.ToUpper(svc.binary) + "_HTTP_ADDR"
			if name == "gateway" {
				port, addrVar = "8080", "SLUICE_HTTP_ADDR"
			}
			require.Equal(t, "0.0.0.0:"+port, env[addrVar])
			require.Equal(t, types.HealthCheckTest{"CMD", "/usr/local/bin/healthprobe", "http://127.0.0.1:" + port + "/readyz"}, s.HealthCheck.Test)
		})
	}
}

func TestComposeGatewayPort(t *testing.T) {
	t.Parallel()
	ports := defaultProject.Services["gateway"].Ports
	require.Len(t, ports, 1)
	require.Equal(t, uint32(8080), ports[0].Target)
	require.Equal(t, "8080", ports[0].Published)
	for _, name := range append([]string{"scheduler", "reaper", "mongo"}, workers...) {
		require.Empty(t, defaultProject.Services[name].Ports, "%s publishes no port", name)
	}
}

func TestComposeNATS(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(natsConf)
	require.NoError(t, err)
	for _, u := range natsUsers {
		require.Contains(t, string(raw), "$"+passwordVar(u))
	}
	for i, name := range natsNodes {
		s := defaultProject.Services[name]
		require.True(t, strings.HasPrefix(s.Image, "nats:2.12"), s.Image)
		require.Equal(t, "unless-stopped", s.Restart)
		require.NotNil(t, s.HealthCheck)
		require.Contains(t, strings.Join(s.HealthCheck.Test, " "), "http://127.0.0.1:8222/healthz")
		cmd := strings.Join(s.Command, " ")
		require.Contains(t, cmd, "--config /etc/nats/nats.conf")
		require.Contains(t, cmd, "--http_port 8222")

		var conf, data bool
		for _, v := range s.Volumes {
			switch v.Target {
			case "/etc/nats/nats.conf":
				conf = true
				abs, err := filepath.Abs(natsConf)
				require.NoError(t, err)
				require.Equal(t, abs, v.Source)
				require.True(t, v.ReadOnly)
			case "/data":
				data = true
				require.Equal(t, types.VolumeTypeVolume, v.Type, "JetStream files on a named volume")
				require.Equal(t, name+"-data", v.Source, "a volume of its own")
			}
		}
		require.True(t, conf, "%s: nats.conf is mounted", name)
		require.True(t, data, "%s: JetStream has a volume", name)

		// nats.conf reads one password variable per user and the node's
		// name; the container gets them all.
		env := environment(s)
		for _, u := range natsUsers {
			require.NotEmpty(t, env[passwordVar(u)], u)
			require.Equal(t, environment(defaultProject.Services[natsNodes[0]])[passwordVar(u)],
				env[passwordVar(u)], "%s: the same users on every node", name)
		}
		require.Equal(t, name, env["NATS_SERVER_NAME"])
		// Each node routes to every node by its service name.
		require.Contains(t, string(raw), "nats-route://"+name+":6222")
		// Only the first node is reachable from the host.
		if i == 0 {
			require.Len(t, s.Ports, 1)
		} else {
			require.Empty(t, s.Ports)
		}
	}
}

func TestComposeMongo(t *testing.T) {
	t.Parallel()
	s := defaultProject.Services["mongo"]
	require.Equal(t, "mongo:7", s.Image)
	require.Equal(t, "unless-stopped", s.Restart)
	require.Equal(t, types.ShellCommand{"--replSet", "rs0", "--bind_ip_all"}, s.Command)
	require.NotNil(t, s.HealthCheck)
	test := strings.Join(s.HealthCheck.Test, " ")
	require.Contains(t, test, "mongosh")
	require.Contains(t, test, "rs.initiate({_id: 'rs0', members: [{_id: 0, host: 'mongo:27017'}]})")
	require.Contains(t, test, "isWritablePrimary")
	var data bool
	for _, v := range s.Volumes {
		data = data || (v.Target == "/data/db" && v.Type == types.VolumeTypeVolume)
	}
	require.True(t, data, "the database has a volume")
}

func TestComposePasswordsFromEnvironment(t *testing.T) {
	t.Parallel()
	p, err := loadProject(t.Context(), map[string]string{
		"SLUICE_NATS_WORKER_2_PASSWORD": "s3cret-w",
		"SLUICE_NATS_GATEWAY_PASSWORD":  "s3cret-g",
	})
	require.NoError(t, err)
	nats := environment(p.Services[natsNodes[0]])
	require.Equal(t, "s3cret-w", nats["NATS_WORKER_2_PASSWORD"])
	require.Equal(t, "s3cret-w", environment(p.Services["worker-2"])["SLUICE_NATS_PASSWORD"])
	require.NotEqual(t, "s3cret-w", environment(p.Services["worker-1"])["SLUICE_NATS_PASSWORD"], "each worker has its own")
	require.Equal(t, "s3cret-g", nats["NATS_GATEWAY_PASSWORD"])
	require.Equal(t, "s3cret-g", environment(p.Services["gateway"])["SLUICE_NATS_PASSWORD"])
	require.Equal(t, environment(defaultProject.Services["reaper"])["SLUICE_NATS_PASSWORD"],
		environment(p.Services["reaper"])["SLUICE_NATS_PASSWORD"], "unset: the default")
}

// TestComposeFormerNames: a deployment upgraded with the contract's names
// and the gateway's released names in its shell or .env keeps its tokens
// and limits: the contract's names reach the services as they are, with
// no warning; a released name that was renamed still works for one
// release, and the gateway is given it so that it warns.
func TestComposeFormerNames(t *testing.T) {
	t.Parallel()
	p, err := loadProject(t.Context(), map[string]string{
		"SLUICE_API_TOKENS":                  "acme:s3cret-token",
		"SLUICE_MAX_ACTIVE":                  "77",
		"SLUICE_TENANT_MAX_ITEMS":            "500",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "5",
	})
	require.NoError(t, err)
	g, err := gateway.LoadConfig(environment(p.Services["gateway"]))
	require.NoError(t, err)
	require.Equal(t, "acme:s3cret-token", g.APITokens, "never open mode")
	require.Equal(t, 77, g.MaxActive)
	require.Equal(t, 500, g.TenantMaxItems)
	require.Len(t, g.Deprecated, 1, "a warning for the former name only")
	require.Equal(t, "SLUICE_GATEWAY_TENANT_MAX_ITEMS", g.Deprecated[0].New)
	w, err := worker.LoadConfig(environment(p.Services["worker-1"]))
	require.NoError(t, err)
	require.Equal(t, 5, w.MaxConcurrent)
	require.Empty(t, w.Deprecated)

	// Unset, the new names take the services' defaults.
	g, err = gateway.LoadConfig(environment(defaultProject.Services["gateway"]))
	require.NoError(t, err)
	require.Equal(t, gateway.DefaultConfig().MaxActive, g.MaxActive)
	require.Empty(t, g.APITokens)
	require.Empty(t, g.Deprecated)
	w, err = worker.LoadConfig(environment(defaultProject.Services["worker-1"]))
	require.NoError(t, err)
	require.Equal(t, 2, w.MaxConcurrent)
}

// TestDockerfile checks the image: static binaries of every service (and
// the health probe) on distroless, running as non-root.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	f, err := os.Open(dockerfile)
	require.NoError(t, err)
	defer f.Close()
	var froms, users []string
	var text strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		text.WriteString(line + "\n")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, fields[1])
		case "USER":
			users = append(users, fields[1])
		}
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, len(froms), 2, "multi-stage")
	require.Equal(t, "gcr.io/distroless/static-debian12:nonroot", froms[len(froms)-1])
	require.Equal(t, []string{"nonroot:nonroot"}, users)
	body := text.String()
	require.Contains(t, body, "CGO_ENABLED=0")
	for _, svc := range sluiceServices {
		require.Contains(t, body, svc.binary)
		require.DirExists(t, filepath.Join("../../services", svc.binary))
		require.FileExists(t, filepath.Join("../../services", svc.binary, "main.go"))
	}
	require.Contains(t, body, "for s in gateway scheduler worker reaper; do")
	require.Contains(t, body, "-o /out/$s ./services/$s")
	require.Contains(t, body, "./deploy/compose/healthprobe")
	require.FileExists(t, "healthprobe/main.go")
	require.Contains(t, body, "COPY --from=build /out/ /usr/local/bin/")
}
