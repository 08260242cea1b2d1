package contracts

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeErrorsSpeakJSON: every decode error names the JSON path and
// the JSON types, never a Go type or struct.
func TestDecodeErrorsSpeakJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"string for an integer", `{"kind":"a","priority":"9"}`, "priority: expected an integer, got a string"},
		{"fraction for an integer", `{"kind":"a","priority":1.5}`, "priority: expected an integer, got 1.5"},
		{"too big for an integer", `{"kind":"a","priority":99999999999999999999}`, "priority: expected an integer, got 99999999999999999999"},
		{"number for a string", `{"kind":7}`, "kind: expected a string, got a number"},
		{"object for an array", `{"kind":"a","inputs":{}}`, "inputs: expected an array, got an object"},
		{"string for a bool", `{"kind":"a","fail_fast":"yes"}`, "fail_fast: expected true or false, got a string"},
		{"array element, by index", `{"kind":"a","inputs":[{"name":"a"},{"name":1}]}`, "inputs[1].name: expected a string, got a number"},
		{"leading blanks", " \n\t{\"kind\":\"a\",\"max_attempts\":true}", "max_attempts: expected an integer, got true or false"},
		{"unknown field", `{"kind":"a","tenant":"t"}`, "tenant: unknown field"},
		{"unknown field inside an element", `{"kind":"a","inputs":[{"name":"a","digest":"x"}]}`, "inputs[0].digest: unknown field"},
		{"the payload is the tenant's own", `{"kind":"a","payload":{"tenant":1},"x":2}`, "x: unknown field"},
		{"an odd key is quoted", `{"kind":"a","a.b c":1}`, `"a.b c": unknown field`},
		{"fields match ignoring case", `{"KIND":"a","Priority":"1"}`, "Priority: expected an integer, got a string"},
		{"broken JSON", `{"kind" 1}`, "not valid JSON: invalid character '1' after object key (at byte 9)"},
		{"cut short", `{"kind":`, "not valid JSON: it ends early"},
		{"trailing data", `{"kind":"a"}]`, "trailing data after the JSON value"},
		{"not an object", `["a"]`, "the body must be a JSON object"},
		{"empty", ` `, "empty body, want a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeSubmit([]byte(tc.in))
			require.Error(t, err)
			var de *DecodeError
			require.True(t, errors.As(err, &de), "%T", err)
			require.Equal(t, tc.want, err.Error())
			requireNoGoTerms(t, err.Error())
		})
	}
}

// TestDecodeErrorsOfOtherDocuments: the batch envelope and the internal
// messages speak the same way.
func TestDecodeErrorsOfOtherDocuments(t *testing.T) {
	t.Parallel()
	_, err := DecodeBatch([]byte(`{"jobs":"all"}`))
	require.EqualError(t, err, "jobs: expected an array, got a string")
	_, err = DecodeBatch([]byte(`{"jobs":[],"more":[]}`))
	require.EqualError(t, err, "more: unknown field")
	_, err = DecodeHeartbeat([]byte(`{"worker_id":"w1","leases":[{"job_id":"j1","attempt":"1"}]}`))
	require.EqualError(t, err, "leases[0].attempt: expected an integer, got a string")
	_, err = DecodeHeartbeat([]byte(`{"worker_id":"w1","leases":[{"job_id":"j1","claim":1},{"job_id":"j2","claim":2,"x":1}]}`))
	require.EqualError(t, err, "leases[1].x: unknown field")
	_, err = DecodeHeartbeat([]byte(`{"worker_id":"w1","leases":[{"job_id":"j1","claim":"1"}]}`))
	require.EqualError(t, err, "leases[0].claim: expected an integer, got a string")

	var p struct {
		MS int64 `json:"ms"`
	}
	err = DecodeWithin("payload", []byte(`{"ms":"5"}`), &p)
	require.EqualError(t, err, "payload.ms: expected an integer, got a string")
	err = DecodeWithin("payload", []byte(`{"ms":5,"s":1}`), &p)
	require.EqualError(t, err, "payload.s: unknown field")
	err = DecodeWithin("payload", []byte(`[5]`), &p)
	require.EqualError(t, err, "payload: expected an object, got an array")
}

// TestJSONTypeNames maps Go types to what a caller must send.
func TestJSONTypeNames(t *testing.T) {
	t.Parallel()
	var (
		i   int
		u   uint8
		f   float64
		s   string
		b   bool
		sl  []string
		m   map[string]int
		st  struct{}
		raw json.RawMessage
		p   *int
	)
	for v, want := range map[any]string{
		&i: "an integer", &u: "a non-negative integer", &f: "a number", &s: "a string", &b: "true or false",
		&sl: "an array", &m: "an object", &st: "an object", &raw: "a base64 string", &p: "an integer",
	} {
		require.Equal(t, want, jsonTypeOf(typeOfPointee(v)), "%T", v)
	}
	for in, want := range map[string]string{
		"string": "a string", "number": "a number", "number -1": "-1", "bool": "true or false",
		"array": "an array", "object": "an object",
	} {
		require.Equal(t, want, describeValue(in))
	}
}

// requireNoGoTerms fails when msg speaks of Go.
func requireNoGoTerms(t *testing.T, msg string) {
	t.Helper()
	for _, w := range []string{"Go ", "struct", "unmarshal", "json:", "SubmitRequest", "int64", "[]"} {
		require.False(t, strings.Contains(msg, w), "%q speaks of %q", msg, w)
	}
}

func typeOfPointee(v any) reflect.Type { return reflect.TypeOf(v).Elem() }
