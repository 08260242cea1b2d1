// Package kinds holds the worker's built-in job kinds: "sleep", which waits
// for a while (useful for tests, demos and load generation), and "exec",
// which runs an allow-listed program in its own process group. Each kind is
// a Func over the raw JSON payload; the payload decoders are strict and
// exported so they can be tested and fuzzed on their own.
package kinds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Run is one run of a job as a kind sees it: its payload and the scratch
// directory of this run alone (made on the first call of Scratch, removed
// when the run ends).
type Run struct {
	Payload json.RawMessage
	Scratch func() (string, error)
	// InputEnv are the run's pinned inputs: their variables
	// (SLUICE_INPUT_<NAME>) and the paths of the run's own copies.
	InputEnv map[string]string
}

// Func runs one job of a kind: it decodes the payload, does the work and
// returns a JSON result. An error that is a *contracts.ClassedError keeps
// its class; a cancelled ctx makes it return ctx's error.
type Func func(ctx context.Context, r Run) (json.RawMessage, error)

// Names of the built-in kinds.
const (
	Sleep = "sleep"
	Exec  = "exec"
)

// Names returns every built-in kind, sorted.
func Names() []string { return []string{Exec, Sleep} }

// Known reports whether name is a built-in kind.
func Known(name string) bool { return slices.Contains(Names(), name) }

// isAbsent reports whether a payload was not given: empty or JSON null.
func isAbsent(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// decodeStrict decodes exactly one JSON object into v, rejecting unknown
// fields, a non-object value and trailing data.
func decodeStrict(data []byte, v any) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return errors.New("payload must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode payload: trailing data after the JSON object")
	}
	return nil
}
