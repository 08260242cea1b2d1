package contracts

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBuiltinPayloads: the payload rules of the built-in kinds, each error
// a *FieldError naming the field.
func TestBuiltinPayloads(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxExecArgBytes+1)
	tests := []struct {
		name, kind, payload string
		field               string // "" = valid
		reason              string // substring
	}{
		{"sleep", KindSleep, `{"ms":250}`, "", ""},
		{"sleep without payload", KindSleep, ``, "", ""},
		{"sleep null", KindSleep, `null`, "", ""},
		{"sleep empty object", KindSleep, `{}`, "", ""},
		{"sleep negative", KindSleep, `{"ms":-1}`, "payload.ms", "must be between 0 and 86400000, got -1"},
		{"sleep too long", KindSleep, `{"ms":86400001}`, "payload.ms", "must be between 0 and 86400000"},
		{"sleep ms a string", KindSleep, `{"ms":"10"}`, "payload.ms", "expected an integer, got a string"},
		{"sleep ms a fraction", KindSleep, `{"ms":1.5}`, "payload.ms", "expected an integer, got 1.5"},
		{"sleep unknown field", KindSleep, `{"ms":1,"seconds":2}`, "payload.seconds", "unknown field"},
		{"sleep not an object", KindSleep, `5`, "payload", "must be a JSON object"},
		{"exec", KindExec, `{"argv":["echo","hi"],"timeout":"30s","dir":"d","env":{"A_1":"v"}}`, "", ""},
		{"exec without payload", KindExec, ``, "payload", "is required"},
		{"exec without argv", KindExec, `{"timeout":"1s"}`, "payload.argv", "is required"},
		{"exec empty argv", KindExec, `{"argv":[]}`, "payload.argv", "is required"},
		{"exec argv a string", KindExec, `{"argv":"echo hi"}`, "payload.argv", "expected an array, got a string"},
		{"exec argv of numbers", KindExec, `{"argv":["echo",1]}`, "payload.argv[1]", "expected a string, got a number"},
		{"exec empty program", KindExec, `{"argv":[""]}`, "payload.argv[0]", "must name a program"},
		{"exec NUL in an argument", KindExec, `{"argv":["echo","a\u0000b"]}`, "payload.argv[1]", "NUL"},
		{"exec argument too long", KindExec, `{"argv":["echo","` + long + `"]}`, "payload.argv[1]", "at most 4096"},
		{"exec timeout words", KindExec, `{"argv":["echo"],"timeout":"soon"}`, "payload.timeout", "not a Go duration"},
		{"exec timeout negative", KindExec, `{"argv":["echo"],"timeout":"-1s"}`, "payload.timeout", "must be positive"},
		{"exec timeout too long", KindExec, `{"argv":["echo"],"timeout":"25h"}`, "payload.timeout", "at most 24h"},
		{"exec env name", KindExec, `{"argv":["echo"],"env":{"A-B":"v"}}`, "payload.env", "not a variable name"},
		{"exec env loader", KindExec, `{"argv":["echo"],"env":{"LD_PRELOAD":"x"}}`, "payload.env", "not allowed"},
		{"exec unknown field", KindExec, `{"argv":["echo"],"cwd":"/"}`, "payload.cwd", "unknown field"},
		{"other kinds are their handlers' business", "resize", `{"ms":-1}`, "", ""},
		{"other kinds may have any payload", "resize", `[1,2]`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateBuiltinPayload(tc.kind, []byte(tc.payload))
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tc.field, fe.Field, err.Error())
			require.Contains(t, fe.Reason, tc.reason)
		})
	}
}

func TestExecPayloadDefaults(t *testing.T) {
	t.Parallel()
	p, timeout, err := DecodeExecPayload([]byte(`{"argv":["echo"]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"echo"}, p.Argv)
	require.Equal(t, DefaultExecTimeout, timeout)
	s, err := DecodeSleepPayload([]byte(`{"ms":1500}`))
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, s.Duration())
}

// TestSubmitChecksBuiltinPayloads: a submit of a built-in kind is refused
// (422) for a payload its run would refuse, and so is a fan-out for an
// item that is not one.
func TestSubmitChecksBuiltinPayloads(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for body, want := range map[string]string{
		`{"kind":"sleep","payload":{"ms":-5}}`:                "payload.ms: must be between 0 and 86400000, got -5",
		`{"kind":"exec","payload":{"timeout":"1s"}}`:          `payload.argv: is required: the program and its arguments, ["program", …]`,
		`{"kind":"exec"}`:                                     `payload: is required for kind exec: {"argv":["program", …]}`,
		`{"kind":"sleep","items":[{"ms":1},{"ms":-1}]}`:       "items[1].ms: must be between 0 and 86400000, got -1",
		`{"kind":"exec","items":[{"argv":["a"]},{"argv":1}]}`: "items[1].argv: expected an array, got a number",
	} {
		r, err := DecodeSubmit([]byte(body))
		require.NoError(t, err, body)
		_, err = r.Validate(now, Limits{})
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", body, err)
		require.Equal(t, want, err.Error(), body)
	}
	for _, body := range []string{`{"kind":"sleep"}`, `{"kind":"sleep","items":[{"ms":1},null]}`, `{"kind":"custom","payload":{"ms":-5}}`} {
		r, err := DecodeSubmit([]byte(body))
		require.NoError(t, err, body)
		_, err = r.Validate(now, Limits{})
		require.NoError(t, err, body)
	}
}
