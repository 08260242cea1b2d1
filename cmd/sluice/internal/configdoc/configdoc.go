// Package configdoc writes docs/configuration.md from the services'
// Config types: every SLUICE_* variable with its type, default and
// description (the env, envDefault and doc struct tags), the variables
// every service shares once, each service's own, and the former names that
// still work for one release (the envOld tags). The document is generated,
// never edited: a test fails when it differs from what Render writes
// ("make docs-config" writes it again).
package configdoc

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/envconfig"
	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/reaper/reaper"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// Path is where the document lives, from the repository's root.
const Path = "docs/configuration.md"

// Service is one service binary and the Config type it reads.
type Service struct {
	// Name is the service's name, and its variables' prefix in upper case.
	Name string
	// Config is the service's Config type.
	Config reflect.Type
}

// Prefix is what the name of a variable only this service reads starts
// with: SLUICE_GATEWAY_ for the gateway.
func (s Service) Prefix() string { return "SLUICE_" + strings.ToUpper(s.Name) + "_" }

// Services are the four service binaries, in the order the document
// lists them.
var Services = []Service{
	{Name: "gateway", Config: reflect.TypeFor[gateway.Config]()},
	{Name: "scheduler", Config: reflect.TypeFor[scheduler.Config]()},
	{Name: "worker", Config: reflect.TypeFor[worker.Config]()},
	{Name: "reaper", Config: reflect.TypeFor[reaper.Config]()},
}

// Fixed are the names the design's configuration and tenancy contracts fix, with
// their meanings: they keep them, even where the naming rule would name
// them otherwise (no service prefix on the gateway's SLUICE_MAX_ACTIVE,
// the word TASKS in SLUICE_WORKER_MAX_CONCURRENT_TASKS).
var Fixed = []string{
	"SLUICE_MAX_ACTIVE",
	"SLUICE_TENANT_MAX_ACTIVE",
	"SLUICE_WORKER_MAX_CONCURRENT_TASKS",
	"SLUICE_RETRY_INTERVAL",
	"SLUICE_DISPATCH_DEADLINE",
	"SLUICE_STALE_THRESHOLD",
	"SLUICE_HEARTBEAT_INTERVAL",
	"SLUICE_WORKER_IDLE_TIMEOUT",
	"SLUICE_WORKER_MAX_LIFETIME",
	"SLUICE_NATS_URL",
	"SLUICE_STORE",
	"SLUICE_DATA_DIR",
	"SLUICE_HTTP_ADDR",
	"SLUICE_API_TOKENS",
	"SLUICE_PIN_ROOTS",
	"SLUICE_WORKER_FETCH_ALLOW",
}

// Variable is one environment variable of a Config type.
type Variable struct {
	// Name is the variable (the env tag).
	Name string
	// Type is what its value is: duration, integer, number, boolean,
	// string or list.
	Type string
	// Default is its envDefault tag; empty when it has none.
	Default string
	// Doc is its description (the doc tag).
	Doc string
	// Field is the Go field that holds it, for messages.
	Field string
}

// Variables lists the variables of a Config type t, nested structs (the
// shared bus, store and log settings) included, in field order.
func Variables(t reflect.Type) []Variable {
	var out []Variable
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, Variables(f.Type)...)
			continue
		case name == "":
			continue
		}
		out = append(out, Variable{Name: name, Type: typeName(f), Default: f.Tag.Get("envDefault"),
			Doc: f.Tag.Get("doc"), Field: t.Name() + "." + f.Name})
	}
	return out
}

// typeName is how the document names a field's value.
func typeName(f reflect.StructField) string {
	switch {
	case f.Type == reflect.TypeFor[time.Duration]():
		return "duration"
	case f.Type.Kind() == reflect.Slice:
		if sep := f.Tag.Get("envSeparator"); sep == " " {
			return "list (space-separated)"
		}
		return "list"
	}
	switch f.Type.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	default:
		return "string"
	}
}

// Readers maps every variable to the services that read it, in the order
// of Services.
func Readers() map[string][]string {
	out := map[string][]string{}
	for _, s := range Services {
		for _, v := range Variables(s.Config) {
			out[v.Name] = append(out[v.Name], s.Name)
		}
	}
	return out
}

// Render writes the whole document.
func Render() []byte {
	var b bytes.Buffer
	readers := Readers()
	b.WriteString(intro)
	for _, name := range Fixed {
		fmt.Fprintf(&b, "   - `%s` (%s)\n", name, strings.Join(readers[name], ", "))
	}
	b.WriteString(rule)

	b.WriteString("\n## Shared by the services\n\n")
	b.WriteString("One meaning wherever they are read; set them alike for every service of a deployment.\n\n")
	b.WriteString("| Variable | Type | Default | Read by | Description |\n|---|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, s := range Services {
		for _, v := range Variables(s.Config) {
			if len(readers[v.Name]) < 2 || seen[v.Name] {
				continue
			}
			seen[v.Name] = true
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", v.Name, v.Type, def(v), strings.Join(readers[v.Name], ", "), cell(v.Doc))
		}
	}

	for _, s := range Services {
		fmt.Fprintf(&b, "\n## %s\n\n", strings.ToUpper(s.Name[:1])+s.Name[1:])
		fmt.Fprintf(&b, "Read by the %s only (`%s…`, or a name the design fixes), besides the shared variables above.\n\n", s.Name, s.Prefix())
		b.WriteString("| Variable | Type | Default | Description |\n|---|---|---|---|\n")
		for _, v := range Variables(s.Config) {
			if len(readers[v.Name]) > 1 {
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, v.Type, def(v), cell(v.Doc))
		}
	}

	b.WriteString(deprecatedIntro)
	b.WriteString("| Former name | New name | Service |\n|---|---|---|\n")
	type row struct{ old, new, svc, note string }
	var rows []row
	for _, s := range Services {
		for _, r := range envconfig.Renames(s.Config) {
			var note string
			if r.Now != "" {
				note = fmt.Sprintf("`%s` now sets only %s. The %s still reads it, with a warning, while `%s` is unset.",
					r.Old, r.Now, s.Name, r.New)
			}
			rows = append(rows, row{r.Old, r.New, s.Name, note})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.old+" "+a.svc, b.old+" "+b.svc) })
	var notes []string
	for _, r := range rows {
		mark := ""
		if r.note != "" {
			notes = append(notes, r.note)
			mark = fmt.Sprintf(" (note %d)", len(notes))
		}
		fmt.Fprintf(&b, "| `%s` | `%s`%s | %s |\n", r.old, r.new, mark, r.svc)
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	for i, n := range notes {
		fmt.Fprintf(&b, "Note %d: %s\n", i+1, n)
	}
	b.WriteString(others)
	return b.Bytes()
}

// def is a variable's default as the tables show it: without an
// envDefault tag, its type's zero value (0s, 0, false), or a dash.
func def(v Variable) string {
	d := v.Default
	if d == "" {
		d = map[string]string{"duration": "0s", "integer": "0", "number": "0", "boolean": "false"}[v.Type]
	}
	if d == "" {
		return "—"
	}
	return "`" + d + "`"
}

// cell makes text safe inside a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

const intro = `# Configuration

<!-- Generated from the services' Config types by ` + "`make docs-config`" + `; do not edit by hand. -->

Every Sluice service reads its configuration from ` + "`SLUICE_*`" + ` environment
variables when it starts. Durations use Go's syntax (` + "`500ms`, `2s`, `10m`, `168h`" + `),
lists are comma-separated, and a variable set to the empty string counts
as unset (its default applies). A service with an invalid value refuses to
start, with an error that names the variable. ` + "`sluice dev`" + ` runs every
service in one process and reads the same variables.

## Naming rule

1. **The names the design's configuration and tenancy contracts fix keep their names
   and meanings**, even where the rules below would name them otherwise
   (no service prefix on a variable one service reads, the word ` + "`TASKS`" + `):
`

// rule is the naming rule after its list of fixed names.
const rule = `2. Every other variable read by **one service only** starts with that
   service's prefix: ` + "`SLUICE_GATEWAY_…`, `SLUICE_SCHEDULER_…`, `SLUICE_WORKER_…`, `SLUICE_REAPER_…`" + `.
3. A variable read by **several services** has no service prefix and one
   meaning: one type, one default, one description (the NATS connection,
   the store, the data directory, logging, the stale threshold, the runtime
   bound, the shutdown timeout).
4. A limit is ` + "`MAX_<what>`" + ` (` + "`SLUICE_GATEWAY_MAX_STREAMS`" + `), a per-tenant limit
   ` + "`TENANT_MAX_<what>`" + ` (` + "`SLUICE_GATEWAY_TENANT_MAX_STREAMS`" + `), a lower bound
   ` + "`MIN_<what>`" + `, and the value a job gets when it asks for none
   ` + "`DEFAULT_<field>`" + `. No name says ` + "`CONCURRENCY`" + ` or ` + "`TASKS`" + `, except the contract's
   ` + "`SLUICE_WORKER_MAX_CONCURRENT_TASKS`" + `.
5. A name has one meaning everywhere, and a former name is never given a
   new meaning. One exception, for one release: ` + "`SLUICE_RETRY_INTERVAL`" + ` is the
   scheduler's re-offer period (the contract's meaning); the gateway, which
   read it as its Retry-After hint, still does while
   ` + "`SLUICE_GATEWAY_RETRY_AFTER`" + ` is unset, and warns (see Former names).

The tests of ` + "`cmd/sluice/internal/configdoc`" + ` check the rule on every variable.
`

const deprecatedIntro = `
## Former names

The names below were renamed to follow the rule above. They still work in
this release: when a former name is set and its new name is not, the service
uses its value and logs a warning naming the new variable; when both are
set, the new name wins and the warning says the former one was ignored.
They will be removed in the next release. A former name that another
service reads now, with a meaning of its own (see its note), draws no
warning once the new name is set: it is then that service's variable only.

`

const others = `
## Variables outside the services

Not read by the services, so not in the tables above:

- ` + "`SLUICE_URL`, `SLUICE_TOKEN`" + `: the ` + "`sluice`" + ` CLI's server address (default
  ` + "`http://127.0.0.1:8080`" + `) and API token.
- ` + "`SLUICE_DEV_WORKERS`" + `: how many workers ` + "`sluice dev`" + ` starts (default 2).
- Set **by** Sluice for the programs it runs: ` + "`SLUICE_SCALE_KIND`, `SLUICE_SCALE_READY`,\n  `SLUICE_SCALE_OLDEST_WAIT_MS`" + ` for ` + "`SLUICE_SCHEDULER_SPAWN_COMMAND`" + `;
  ` + "`SLUICE_SCRATCH_DIR`" + ` and ` + "`SLUICE_INPUT_<NAME>`" + ` for an exec job.
`
