package envconfig

import (
	"fmt"
	"os"
	"reflect"
	"strings"
)

// OldTag is the struct tag that lists a variable's former names,
// comma-separated, next to its env tag:
//
//	MaxStreams int `env:"SLUICE_GATEWAY_MAX_STREAMS" envOld:"SLUICE_MAX_STREAMS"`
//
// A former name keeps working for one release: Parse reads its value when
// the new name is not set, and reports a Deprecation either way.
const OldTag = "envOld"

// NowTag marks a former name that is, at the same time, a variable of
// another service with a meaning of its own (a name the design fixes), as
// "NAME:what it sets now":
//
//	RetryAfter time.Duration `env:"SLUICE_GATEWAY_RETRY_AFTER" envOld:"SLUICE_RETRY_INTERVAL" envNow:"SLUICE_RETRY_INTERVAL:the scheduler's re-offer period"`
//
// Such a former name is still read while the new name is not set, with a
// warning that says what it sets now; once the new name is set, it is the
// other service's variable only and draws no warning.
const NowTag = "envNow"

// Deprecation is a former variable name found set in the environment.
type Deprecation struct {
	// Old is the former name that was set; New is the variable that
	// replaces it.
	Old, New string
	// Ignored is true when New was set too: New wins and Old's value is
	// not used.
	Ignored bool
	// Now, when not empty, is what Old sets now as another service's
	// variable (its NowTag).
	Now string
}

// Message is the warning a service logs for d; it names the new variable.
func (d Deprecation) Message() string {
	if d.Now != "" {
		return fmt.Sprintf("%s now sets only %s: set %s for this service (the value of %s is still used for it in this release only)", d.Old, d.Now, d.New, d.Old)
	}
	if d.Ignored {
		return fmt.Sprintf("%s is deprecated and ignored: %s is set too and wins; remove %s", d.Old, d.New, d.Old)
	}
	return fmt.Sprintf("%s is deprecated: rename it %s (its value is used for now; the old name goes in the next release)", d.Old, d.New)
}

// Explain returns err, when not nil, with a note for each variable it
// names that was read from a former name: a user who set SLUICE_OLD must
// not be left wondering about an error that names only SLUICE_NEW. (The
// warnings are logged once the configuration loads; an error stops that.)
func Explain(err error, deprecated []Deprecation) error {
	if err == nil {
		return nil
	}
	var notes []string
	for _, d := range deprecated {
		if !d.Ignored && namesVariable(err.Error(), d.New) {
			notes = append(notes, fmt.Sprintf("%s was read from its former name %s", d.New, d.Old))
		}
	}
	if len(notes) == 0 {
		return err
	}
	return fmt.Errorf("%w\n(%s)", err, strings.Join(notes, "; "))
}

// namesVariable reports whether text holds name as a whole variable name,
// not as the start of a longer one.
func namesVariable(text, name string) bool {
	for i := strings.Index(text, name); i >= 0; {
		end := i + len(name)
		if (i == 0 || !varChar(text[i-1])) && (end == len(text) || !varChar(text[end])) {
			return true
		}
		next := strings.Index(text[end:], name)
		if next < 0 {
			return false
		}
		i = end + next
	}
	return false
}

func varChar(c byte) bool { return c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// Rename is one entry of a Config's table of former names.
type Rename struct {
	// Old is the former name, New the variable that replaces it.
	Old, New string
	// Now, when not empty, is what Old sets now as another service's
	// variable (the field's NowTag).
	Now string
}

// Renames lists the former names of the variables of t (a struct type,
// nested structs included), read from their envOld tags, in field order.
func Renames(t reflect.Type) []Rename {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []Rename
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && name == "" {
			out = append(out, Renames(f.Type)...)
			continue
		}
		now := map[string]string{}
		for entry := range strings.SplitSeq(f.Tag.Get(NowTag), ";") {
			if old, meaning, ok := strings.Cut(entry, ":"); ok {
				now[strings.TrimSpace(old)] = strings.TrimSpace(meaning)
			}
		}
		for old := range strings.SplitSeq(f.Tag.Get(OldTag), ",") {
			if old = strings.TrimSpace(old); old != "" && name != "" {
				out = append(out, Rename{Old: old, New: name, Now: now[old]})
			}
		}
	}
	return out
}

// applyRenames returns the environment Parse reads (environ, or the
// process environment when nil) with the value of each former name of
// renames copied to its new name when the new one is not set, and the
// deprecations found. A variable set to "" counts as not set, as it does
// for the env tags' defaults. A former name that is another service's
// variable now (Rename.Now) draws no deprecation once the new name is set.
func applyRenames(environ map[string]string, renames []Rename) (map[string]string, []Deprecation) {
	if len(renames) == 0 {
		return environ, nil
	}
	out := make(map[string]string, len(environ))
	if environ == nil {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
	} else {
		for k, v := range environ {
			out[k] = v
		}
	}
	var found []Deprecation
	for _, r := range renames {
		old := out[r.Old]
		if old == "" {
			continue
		}
		if out[r.New] != "" {
			if r.Now == "" {
				found = append(found, Deprecation{Old: r.Old, New: r.New, Ignored: true})
			}
			continue
		}
		out[r.New] = old
		found = append(found, Deprecation{Old: r.Old, New: r.New, Now: r.Now})
	}
	return out, found
}
