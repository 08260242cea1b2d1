package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadPayload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte("{\"argv\":[\"echo\",\"hi\"]}\n"), 0o600))
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("not json"), 0o600))
	tests := []struct {
		name, flag, stdin, want, err string
	}{
		{name: "none", flag: ""},
		{name: "inline", flag: `{"ms":5}`, want: `{"ms":5}`},
		{name: "inline non-object JSON", flag: `[1,2]`, want: `[1,2]`},
		{name: "stdin", flag: "-", stdin: " {\"ms\":1}\n", want: `{"ms":1}`},
		{name: "file", flag: "@" + good, want: `{"argv":["echo","hi"]}`},
		{name: "inline not JSON", flag: `{ms:5}`, err: "--payload is not valid JSON"},
		{name: "stdin empty", flag: "-", stdin: "  \n", err: "the payload on stdin is empty"},
		{name: "file not JSON", flag: "@" + bad, err: "the payload in " + bad + " is not valid JSON"},
		{name: "file missing", flag: "@" + filepath.Join(dir, "nope"), err: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readPayload(tc.flag, strings.NewReader(tc.stdin))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				var ue *usageError
				require.ErrorAs(t, err, &ue)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}
