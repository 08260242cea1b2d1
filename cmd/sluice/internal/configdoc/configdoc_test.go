package configdoc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/observe/envconfig"
)

// TestDocumentIsCurrent fails when docs/configuration.md is not what the
// Config types say: a variable added, renamed or described anew without
// the document written again.
func TestDocumentIsCurrent(t *testing.T) {
	t.Parallel()
	committed, err := os.ReadFile(filepath.Join("..", "..", "..", "..", Path))
	require.NoError(t, err)
	if string(committed) != string(Render()) {
		t.Fatalf("%s differs from the services' Config types: run make docs-config and commit the result", Path)
	}
}

// contract is the configuration contract of the design: these names keep
// their names and meanings. Fixed (what the document lists) must say the
// same, so that no edit there drops one quietly.
var contract = []string{
	"SLUICE_MAX_ACTIVE", "SLUICE_TENANT_MAX_ACTIVE", "SLUICE_WORKER_MAX_CONCURRENT_TASKS",
	"SLUICE_RETRY_INTERVAL", "SLUICE_DISPATCH_DEADLINE", "SLUICE_STALE_THRESHOLD",
	"SLUICE_HEARTBEAT_INTERVAL", "SLUICE_WORKER_IDLE_TIMEOUT", "SLUICE_WORKER_MAX_LIFETIME",
	"SLUICE_NATS_URL", "SLUICE_STORE", "SLUICE_DATA_DIR", "SLUICE_HTTP_ADDR", "SLUICE_API_TOKENS",
	// the tenancy contract
	"SLUICE_PIN_ROOTS", "SLUICE_WORKER_FETCH_ALLOW",
}

// contractReaders is who reads each contract name with its contract
// meaning: the gateway's HTTP address, the scheduler's re-offer period.
var contractReaders = map[string][]string{
	"SLUICE_MAX_ACTIVE":                  {"gateway"},
	"SLUICE_TENANT_MAX_ACTIVE":           {"gateway"},
	"SLUICE_WORKER_MAX_CONCURRENT_TASKS": {"worker"},
	"SLUICE_RETRY_INTERVAL":              {"scheduler"},
	"SLUICE_DISPATCH_DEADLINE":           {"gateway"},
	// The scheduler reads the workers' period to check its lease renew
	// point against it.
	"SLUICE_HEARTBEAT_INTERVAL":  {"scheduler", "worker"},
	"SLUICE_WORKER_IDLE_TIMEOUT": {"worker"},
	"SLUICE_WORKER_MAX_LIFETIME": {"worker"},
	"SLUICE_HTTP_ADDR":           {"gateway"},
	"SLUICE_API_TOKENS":          {"gateway"},
	"SLUICE_PIN_ROOTS":           {"gateway"},
	"SLUICE_WORKER_FETCH_ALLOW":  {"worker"},
}

// TestNamingRule checks the rule docs/configuration.md states on every
// variable of every service: (1) the contract's names are variables, read
// by the services that give them their contract meaning, and no service
// treats one as a former name (save the exception of
// TestFormerNamesAreNotReused); (2) any other variable one service reads
// has its prefix; (3) a shared one has none; (4) a limit is MAX_<what>, a
// per-tenant limit TENANT_MAX_<what>, and no name but the contract's says
// CONCURRENCY or TASKS.
func TestNamingRule(t *testing.T) {
	t.Parallel()
	readers := Readers()
	require.ElementsMatch(t, contract, Fixed, "the names the design fixes")
	fixed := map[string]bool{}
	for _, name := range Fixed {
		fixed[name] = true
		require.Contains(t, readers, name, "%s is fixed by the design: some service must read it", name)
		if want, ok := contractReaders[name]; ok {
			require.Equal(t, want, readers[name], "%s: read by the service the design gives it to", name)
		} else {
			require.Greater(t, len(readers[name]), 1, "%s is shared", name)
		}
	}
	name := regexp.MustCompile(`^SLUICE_[A-Z0-9]+(_[A-Z0-9]+)*$`)
	for _, s := range Services {
		for _, r := range envconfig.Renames(s.Config) {
			if fixed[r.Old] {
				require.NotEmpty(t, r.Now, "%s is a contract name: the %s may not treat it as the former name of %s", r.Old, s.Name, r.New)
			}
		}
		for _, v := range Variables(s.Config) {
			require.Regexp(t, name, v.Name, v.Field)
			if fixed[v.Name] {
				continue
			}
			var own string // the service whose prefix the name has, if any
			for _, o := range Services {
				if strings.HasPrefix(v.Name, o.Prefix()) {
					own = o.Name
				}
			}
			if len(readers[v.Name]) == 1 {
				require.Equal(t, s.Name, own, "%s is read by the %s only: it must start with %s", v.Name, s.Name, s.Prefix())
			} else {
				require.Empty(t, own, "%s is read by %v: a shared variable has no service prefix", v.Name, readers[v.Name])
			}
			rest := strings.TrimPrefix(strings.TrimPrefix(v.Name, s.Prefix()), "SLUICE_")
			require.NotContains(t, rest, "PER_TENANT", "%s: a per-tenant limit is TENANT_MAX_<what>", v.Name)
			rest = strings.TrimPrefix(rest, "DEFAULT_")
			rest = strings.TrimPrefix(rest, "TENANT_")
			for i, w := range strings.Split(rest, "_") {
				require.NotContains(t, []string{"CONCURRENCY", "TASKS"}, w, "%s: a limit is MAX_<what>", v.Name)
				if (w == "MAX" || w == "MIN") && i != 0 {
					require.Failf(t, "limit word out of place", "%s: a bound is MAX_<what>, MIN_<what> or TENANT_MAX_<what>, the word first", v.Name)
				}
			}
		}
	}
}

// TestSharedVariablesMeanOneThing: a variable several services read has
// one type, one default and one description everywhere.
func TestSharedVariablesMeanOneThing(t *testing.T) {
	t.Parallel()
	first := map[string]Variable{}
	for _, s := range Services {
		for _, v := range Variables(s.Config) {
			f, ok := first[v.Name]
			if !ok {
				first[v.Name] = v
				continue
			}
			require.Equal(t, f.Type, v.Type, "%s: %s and %s differ in type", v.Name, f.Field, v.Field)
			require.Equal(t, f.Default, v.Default, "%s: %s and %s differ in default", v.Name, f.Field, v.Field)
			require.Equal(t, f.Doc, v.Doc, "%s: %s and %s are described differently", v.Name, f.Field, v.Field)
		}
	}
}

// TestEveryVariableIsDescribed: no variable reaches the document without
// a doc tag.
func TestEveryVariableIsDescribed(t *testing.T) {
	t.Parallel()
	for _, s := range Services {
		for _, v := range Variables(s.Config) {
			require.NotEmpty(t, v.Doc, "%s (%s) has no doc tag", v.Name, v.Field)
		}
	}
}

// reusedFormerNames are the former names that are at the same time a
// variable of another service, each with that service and the reason it
// is allowed. There is one: the design's contract gives
// SLUICE_RETRY_INTERVAL to the scheduler (its re-offer period), while the
// gateway had read it as its Retry-After hint; the gateway's hint moved to
// SLUICE_GATEWAY_RETRY_AFTER, and for one release the gateway still reads
// the released name while the new one is unset, so that an upgrade keeps
// its Retry-After. No other former name may be a current variable.
var reusedFormerNames = map[string]struct {
	formerOf, readBy, reason string
}{
	"SLUICE_RETRY_INTERVAL": {
		formerOf: "gateway",
		readBy:   "scheduler",
		reason:   "contract name of the scheduler's re-offer period; the gateway's Retry-After hint read it until this release",
	},
}

// TestFormerNamesAreNotReused: a former name is no variable of any service
// any more (it would have two meanings), save reusedFormerNames; and it
// names one new variable per service.
func TestFormerNamesAreNotReused(t *testing.T) {
	t.Parallel()
	readers := Readers()
	used := map[string]bool{}
	for _, s := range Services {
		seen := map[string]string{}
		for _, r := range envconfig.Renames(s.Config) {
			require.Contains(t, readers, r.New)
			if prev, ok := seen[r.Old]; ok {
				require.Failf(t, "a former name for two variables", "%s: %s and %s in the %s", r.Old, prev, r.New, s.Name)
			}
			seen[r.Old] = r.New
			if _, current := readers[r.Old]; !current {
				require.Empty(t, r.Now, "%s is no variable of any service: its envNow tag says otherwise", r.Old)
				continue
			}
			ex, ok := reusedFormerNames[r.Old]
			require.True(t, ok, "%s is a former name and a variable of %v", r.Old, readers[r.Old])
			used[r.Old] = true
			require.Equal(t, ex.formerOf, s.Name, "%s may be a former name of the %s only (%s)", r.Old, ex.formerOf, ex.reason)
			require.Equal(t, []string{ex.readBy}, readers[r.Old], "%s is the %s's variable only (%s)", r.Old, ex.readBy, ex.reason)
			require.NotEmpty(t, r.Now, "%s: the %s's warning must say what it sets now (an envNow tag)", r.Old, s.Name)
		}
	}
	for old := range reusedFormerNames {
		require.True(t, used[old], "%s is listed as a reused former name but no service reads it as one: drop it", old)
	}
}
