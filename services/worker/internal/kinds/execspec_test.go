package kinds_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/worker/internal/kinds"
)

func TestParseExecPayload(t *testing.T) {
	t.Parallel()
	allow := []string{"echo", "/bin/sh"}
	manyArgs := `{"argv":["echo"` + strings.Repeat(`,"x"`, kinds.MaxExecArgs) + `]}`
	longArg := `{"argv":["echo","` + strings.Repeat("a", kinds.MaxExecArgBytes+1) + `"]}`
	maxArg := `{"argv":["echo","` + strings.Repeat("a", kinds.MaxExecArgBytes) + `"]}`
	tests := []struct {
		name    string
		payload string
		allow   []string
		want    kinds.ExecSpec
		wantErr string
	}{
		{"minimal", `{"argv":["echo"]}`, allow,
			kinds.ExecSpec{Argv: []string{"echo"}, Timeout: kinds.DefaultExecTimeout}, ""},
		{"everything", `{"argv":["/bin/sh","-c","true"],"timeout":"30s","dir":"/tmp","env":{"FOO":"bar"}}`, allow,
			kinds.ExecSpec{Argv: []string{"/bin/sh", "-c", "true"}, Timeout: 30 * time.Second, Dir: "/tmp", Env: map[string]string{"FOO": "bar"}}, ""},
		{"longest arg", maxArg, allow,
			kinds.ExecSpec{Argv: []string{"echo", strings.Repeat("a", kinds.MaxExecArgBytes)}, Timeout: kinds.DefaultExecTimeout}, ""},
		{"max timeout", `{"argv":["echo"],"timeout":"24h"}`, allow,
			kinds.ExecSpec{Argv: []string{"echo"}, Timeout: 24 * time.Hour}, ""},
		{"missing payload", ``, allow, kinds.ExecSpec{}, "payload: is required"},
		{"null payload", `null`, allow, kinds.ExecSpec{}, "payload: is required"},
		{"empty argv", `{"argv":[]}`, allow, kinds.ExecSpec{}, "payload.argv: is required"},
		{"no argv", `{}`, allow, kinds.ExecSpec{}, "payload.argv: is required"},
		{"empty program", `{"argv":[""]}`, allow, kinds.ExecSpec{}, "must name a program"},
		{"not allowed", `{"argv":["rm","-rf","/"]}`, allow, kinds.ExecSpec{}, `exec: program "rm" is not allowed`},
		{"path of an allowed name", `{"argv":["/bin/echo"]}`, allow, kinds.ExecSpec{}, "is not allowed"},
		{"name of an allowed path", `{"argv":["sh"]}`, allow, kinds.ExecSpec{}, "is not allowed"},
		{"empty allow list", `{"argv":["echo"]}`, nil, kinds.ExecSpec{}, "is not allowed"},
		{"too many args", manyArgs, allow, kinds.ExecSpec{}, "at most 256"},
		{"arg too long", longArg, allow, kinds.ExecSpec{}, "payload.argv[1]: is 4097 bytes"},
		{"NUL in arg", `{"argv":["echo","a\u0000b"]}`, allow, kinds.ExecSpec{}, "NUL"},
		{"NUL in program", `{"argv":["echo\u0000"]}`, allow, kinds.ExecSpec{}, "NUL"},
		{"bad timeout", `{"argv":["echo"],"timeout":"soon"}`, allow, kinds.ExecSpec{}, "not a Go duration"},
		{"zero timeout", `{"argv":["echo"],"timeout":"0s"}`, allow, kinds.ExecSpec{}, "must be positive"},
		{"negative timeout", `{"argv":["echo"],"timeout":"-1s"}`, allow, kinds.ExecSpec{}, "must be positive"},
		{"timeout over a day", `{"argv":["echo"],"timeout":"24h0m1s"}`, allow, kinds.ExecSpec{}, "at most 24h"},
		{"NUL in dir", `{"argv":["echo"],"dir":"/tmp\u0000"}`, allow, kinds.ExecSpec{}, "payload.dir: contains a NUL"},
		{"bad env name", `{"argv":["echo"],"env":{"A=B":"c"}}`, allow, kinds.ExecSpec{}, "not a variable name"},
		{"loader env", `{"argv":["echo"],"env":{"LD_PRELOAD":"/x.so"}}`, allow, kinds.ExecSpec{}, "not allowed"},
		{"NUL in env value", `{"argv":["echo"],"env":{"A":"\u0000"}}`, allow, kinds.ExecSpec{}, "NUL"},
		{"unknown field", `{"argv":["echo"],"shell":true}`, allow, kinds.ExecSpec{}, "unknown field"},
		{"argv not a list", `{"argv":"echo"}`, allow, kinds.ExecSpec{}, "payload.argv: expected an array, got a string"},
		{"trailing data", `{"argv":["echo"]}[]`, allow, kinds.ExecSpec{}, "trailing data"},
		{"not an object", `["echo"]`, allow, kinds.ExecSpec{}, "JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := kinds.ParseExecPayload([]byte(tc.payload), tc.allow)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseExecPayload(f *testing.F) {
	seeds := []string{
		``, `null`, `{}`, `{"argv":[]}`, `{"argv":["echo"]}`, `{"argv":["echo","hi"],"timeout":"1s"}`,
		`{"argv":["/bin/sh","-c","exit 3"],"dir":"/tmp","env":{"A":"b"}}`,
		`{"argv":["rm"]}`, `{"argv":["echo"],"timeout":"25h"}`, `{"argv":["echo","\u0000"]}`,
		`{"argv":["echo"],"env":{"LD_PRELOAD":"x"}}`, `{"argv":["echo"]} 1`, `{"argv":[1]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	allow := []string{"echo", "/bin/sh"}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := kinds.ParseExecPayload(data, allow)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "exec: "), "error %q lacks the exec: prefix", err)
			return
		}
		require.NotEmpty(t, spec.Argv)
		require.LessOrEqual(t, len(spec.Argv), kinds.MaxExecArgs)
		require.Contains(t, allow, spec.Argv[0])
		for _, a := range spec.Argv {
			require.LessOrEqual(t, len(a), kinds.MaxExecArgBytes)
			require.NotContains(t, a, "\x00")
		}
		require.Positive(t, spec.Timeout)
		require.LessOrEqual(t, spec.Timeout, kinds.MaxExecTimeout)
		require.NotContains(t, spec.Dir, "\x00")
		for k, v := range spec.Env {
			require.NotContains(t, k, "=")
			require.NotContains(t, v, "\x00")
			require.False(t, strings.HasPrefix(k, "LD_"))
		}
	})
}
