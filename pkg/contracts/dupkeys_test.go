package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDuplicateKeys: a key named twice in any object of a submit body,
// at any depth, is a 400 naming it; so is a second key for a field a
// struct already took under another case.
func TestDuplicateKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"top level", `{"kind":"sleep","kind":"exec"}`, "kind: duplicate key"},
		{"top level, in another case", `{"kind":"sleep","KIND":"exec"}`, "KIND: duplicate key (the same field as kind)"},
		{"an escaped key", `{"kind":"exec","k\u0069nd":"sleep"}`, "kind: duplicate key"},
		{"in the payload", `{"kind":"exec","payload":{"argv":["true"],"argv":["rm","-rf","/"]}}`, "payload.argv: duplicate key"},
		{"deep in the payload", `{"kind":"x","payload":{"a":[{"b":1},{"c":{"d":1,"e":2,"d":3}}]}}`, "payload.a[1].c.d: duplicate key"},
		{"in an item", `{"kind":"x","items":[{"a":1},{"a":1,"a":2}]}`, "items[1].a: duplicate key"},
		{"in an input", `{"kind":"x","inputs":[{"name":"a","name":"b","uri":"https://h/a","sha256":"pin"}]}`, "inputs[0].name: duplicate key"},
		{"in resources", `{"kind":"x","resources":{"cpu":1,"cpu":2}}`, "resources.cpu: duplicate key"},
		{"an odd key is quoted", `{"kind":"x","payload":{"a b":1,"a b":2}}`, `payload."a b": duplicate key`},
		{"an empty key", `{"kind":"x","payload":{"":1,"":2}}`, `payload."": duplicate key`},
		{"a large object", `{"kind":"x","payload":{` + manyKeys(40) + `,"k7":0}}`, "payload.k7: duplicate key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeSubmit([]byte(tc.in))
			require.EqualError(t, err, tc.want)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, ErrDuplicateKey)
		})
	}

	// Not duplicates: the same key in different objects, keys that differ
	// only in case where nothing takes them as one (a payload's own keys).
	for _, in := range []string{
		`{"kind":"x","payload":{"a":{"a":1},"b":{"a":2}}}`,
		`{"kind":"x","payload":{"argv":1,"ARGV":2}}`,
		`{"kind":"x","payload":{"a":1,"\u00e9":2,"e\u0301":3}}`,
		`{"kind":"x","items":[{"a":1},{"a":1}]}`,
		`{"kind":"x","payload":{` + manyKeys(100) + `}}`,
	} {
		_, err := DecodeSubmit([]byte(in))
		require.NoError(t, err, in)
	}
}

// TestDuplicateKeysInBuiltinPayloads: a built-in kind's payload is decoded
// into a struct, so a key in another case is a duplicate there; the
// answer is still a 400 (a *DecodeError) naming the key where it stands.
func TestDuplicateKeysInBuiltinPayloads(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for in, want := range map[string]string{
		`{"kind":"exec","payload":{"argv":["true"],"ARGV":["false"]}}`:         "payload.ARGV: duplicate key (the same field as argv)",
		`{"kind":"exec","items":[{"argv":["a"]},{"argv":["a"],"Argv":["b"]}]}`: "items[1].Argv: duplicate key (the same field as argv)",
		`{"kind":"sleep","payload":{"MS":1,"ms":2}}`:                           "payload.ms: duplicate key (the same field as MS)",
		`{"kind":"x","resources":{"cpu":1,"CPU":2}}`:                           "resources.CPU: duplicate key (the same field as cpu)",
	} {
		r, err := DecodeSubmit([]byte(in))
		require.NoError(t, err, in)
		_, err = r.Validate(now, testLimits)
		require.EqualError(t, err, want, in)
		var de *DecodeError
		require.ErrorAs(t, err, &de, in)
		require.ErrorIs(t, err, ErrDuplicateKey, in)
	}
}

// TestDuplicateKeysInBatches: a duplicate in the batch itself refuses the
// batch; one inside a job is that job's own error (DecodeSubmit of it).
func TestDuplicateKeysInBatches(t *testing.T) {
	t.Parallel()
	_, err := DecodeBatch([]byte(`{"jobs":[{"kind":"a"}],"jobs":[{"kind":"b"}]}`))
	require.EqualError(t, err, "jobs: duplicate key")
	require.ErrorIs(t, err, ErrDuplicateKey)

	b, err := DecodeBatch([]byte(`{"jobs":[{"kind":"a"},{"kind":"a","payload":{"x":1,"x":2}}]}`))
	require.NoError(t, err)
	_, err = DecodeSubmit(b.Jobs[0])
	require.NoError(t, err)
	_, err = DecodeSubmit(b.Jobs[1])
	require.EqualError(t, err, "payload.x: duplicate key")
}

// TestDuplicateKeysInMessages: the services' messages are held to it too.
func TestDuplicateKeysInMessages(t *testing.T) {
	t.Parallel()
	_, err := DecodeResult([]byte(`{"job_id":"j1","attempt":1,"worker_id":"w1","state":"succeeded","result":{"a":1,"a":2}}`))
	require.EqualError(t, err, "result.a: duplicate key")
	_, err = DecodeHeartbeat([]byte(`{"worker_id":"w1","worker_id":"w2","leases":[]}`))
	require.EqualError(t, err, "worker_id: duplicate key")
}

// manyKeys is n members "k0":0 … of an object.
func manyKeys(n int) string {
	var b bytes.Buffer
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":0`)
	}
	return b.String()
}

// firstDuplicateByTokens is the first duplicate key of data, found the
// plain way (encoding/json's tokens, a set of keys per object): its path
// and whether there is one. data must be valid JSON.
func firstDuplicateByTokens(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(path string) (string, bool, bool)
	// walk reads one value; it reports a duplicate's path, whether one
	// was found, and whether the walk may go on.
	walk = func(path string) (string, bool, bool) {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return "", false, false
				}
				k := kt.(string)
				if seen[k] {
					return keyPath(path, k), true, false
				}
				seen[k] = true
				if p, found, ok := walk(keyPath(path, k)); found || !ok {
					return p, found, ok
				}
			}
			_, err = dec.Token()
			return "", false, err == nil
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if p, found, ok := walk(joinPath(path, "["+strconv.Itoa(i)+"]")); found || !ok {
					return p, found, ok
				}
			}
			_, err = dec.Token()
			return "", false, err == nil
		}
		return "", false, true
	}
	p, found, _ := walk("")
	return p, found
}

// FuzzDuplicateKeys: on any valid JSON document the scanner finds the
// same first duplicate key (its path) as a plain walk of encoding/json's
// tokens, or none when that finds none; it never panics on any input.
func FuzzDuplicateKeys(f *testing.F) {
	addSeeds(f,
		`{"a":1,"a":2}`, `{"a":1,"b":{"a":1,"a":[]}}`, `[{"a":1},{"b":1,"b":2}]`,
		`{"a":"\"","\"":1,"\u0022":2}`, `{"\u00e9":1,"é":2}`, `{"`+"\xff"+`":1,"`+"\xfe"+`":2}`,
		`{"a\\b":1,"a\u005cb":2}`, `{"x":[1,2,{"y":{"z":null,"z":true}}]}`,
		`{"":0,"":1}`, `{"a":{}}`, `[[],[[]],{}]`, ` { "a" : 1 , "a" : 2 } `,
		`{`+manyKeys(20)+`,"k19":1}`, `{"a b.c[0]":1,"a b.c[0]":2}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		got := checkDuplicateKeys(data, nil, false) // anything: must not panic
		if !json.Valid(data) {
			return
		}
		want, found := firstDuplicateByTokens(data)
		switch {
		case !found && got != nil:
			t.Fatalf("%q: scanner found %q, the tokens none", data, got.Path)
		case found && got == nil:
			t.Fatalf("%q: the tokens found %q, the scanner none", data, want)
		case found && got.Path != want:
			t.Fatalf("%q: scanner found %q, the tokens %q", data, got.Path, want)
		case found && (got.Reason != reasonDuplicate || !errors.Is(got, ErrDuplicateKey)):
			t.Fatalf("%q: %v", data, got)
		}
	})
}
