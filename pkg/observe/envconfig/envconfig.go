// Package envconfig fills a service's Config from SLUICE_* environment
// variables (github.com/caarlos0/env struct tags), makes every parse error
// name the variable at fault, not the Go field, keeps a variable's former
// names (envOld tags) working for one release, and gathers the errors of a
// Config's Validate (Problems), each naming its variable.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/caarlos0/env/v11"
)

// Parse fills dst (a pointer to a struct) from environ, or from the process
// environment when environ is nil, applying envDefault tags. A former name
// of a variable (its envOld tag) is read when the new name is not set;
// every former name found set is returned as a Deprecation for the
// service to log.
func Parse(dst any, environ map[string]string) ([]Deprecation, error) {
	t := reflect.TypeOf(dst).Elem()
	environ, deprecated := applyRenames(environ, Renames(t))
	if err := env.ParseWithOptions(dst, env.Options{Environment: environ}); err != nil {
		return deprecated, Explain(nameVariables(err, t), deprecated)
	}
	return deprecated, nil
}

// nameVariables rewrites the library's parse errors, which name the Go
// field, so they name the environment variable instead.
func nameVariables(err error, t reflect.Type) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("config: %w", err)
	}
	vars := envVars(t)
	out := make([]error, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if v, ok := vars[pe.Name]; ok {
				out = append(out, fmt.Errorf("%s: cannot parse as %s: %w", v, pe.Type, pe.Err))
				continue
			}
		}
		out = append(out, fmt.Errorf("config: %w", e))
	}
	return errors.Join(out...)
}

// envVars maps each field name of t (nested structs included) to its
// environment variable.
func envVars(t reflect.Type) map[string]string {
	out := map[string]string{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct {
			for k, v := range envVars(f.Type) {
				out[k] = v
			}
			continue
		}
		if v := f.Tag.Get("env"); v != "" {
			out[f.Name] = v
		}
	}
	return out
}

// Must returns cfg, panicking when err is not nil. It is for a service's
// DefaultConfig, whose empty environment must always load: a panic there is
// a bug in the service's defaults.
func Must[C any](cfg C, err error) C {
	if err != nil {
		panic(fmt.Sprintf("the default configuration is invalid: %v", err))
	}
	return cfg
}
