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

// TestNamingRule checks the rule docs/configuration.md states on every
// variable of every service.
func TestNamingRule(t *testing.T) {
	t.Parallel()
	readers := Readers()
	name := regexp.MustCompile(`^SLUICE_[A-Z0-9]+(_[A-Z0-9]+)*$`)
	for _, s := range Services {
		for _, v := range Variables(s.Config) {
			require.Regexp(t, name, v.Name, v.Field)
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
			rest = strings.TrimPrefix(rest, "DEFAULT_")
			words := strings.Split(rest, "_")
			for i, w := range words {
				require.NotContains(t, []string{"CONCURRENCY", "TASKS"}, w, "%s: a limit is MAX_<what>", v.Name)
				if (w == "MAX" || w == "MIN") && i != 0 {
					require.Failf(t, "limit word out of place", "%s: a bound is MAX_<what> or MIN_<what>, the word first", v.Name)
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

// TestFormerNamesAreNotReused: a former name is no variable of any service
// any more (it would have two meanings), and it names one new variable per
// service.
func TestFormerNamesAreNotReused(t *testing.T) {
	t.Parallel()
	readers := Readers()
	for _, s := range Services {
		seen := map[string]string{}
		for _, r := range envconfig.Renames(s.Config) {
			require.NotContains(t, readers, r.Old, "%s is a former name and a variable of %v", r.Old, readers[r.Old])
			require.Contains(t, readers, r.New)
			if prev, ok := seen[r.Old]; ok {
				require.Failf(t, "a former name for two variables", "%s: %s and %s in the %s", r.Old, prev, r.New, s.Name)
			}
			seen[r.Old] = r.New
		}
	}
}
