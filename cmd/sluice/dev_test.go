package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDevWorkers(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{"": 2, "0": 0, "7": 7, "64": 64} {
		got, err := devWorkers(v)
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"-1", "two", "1.5"} {
		_, err := devWorkers(v)
		require.ErrorContains(t, err, "SLUICE_DEV_WORKERS", v)
	}
}

// TestDevHelp: `sluice dev -h` prints its help on stdout, in the form of
// the other commands', with each flag's default once.
func TestDevHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, dev([]string{"-h"}, &stdout, &stderr))
	help := stdout.String()
	require.True(t, strings.HasPrefix(help, "usage: sluice dev "), help)
	require.Empty(t, stderr.String())
	for _, flagName := range []string{"-workers", "-nats-listen"} {
		_, after, ok := strings.Cut(help, "  "+flagName+" ")
		require.True(t, ok, "flag %s missing:\n%s", flagName, help)
		lines := strings.SplitN(after, "\n", 3) // the flag's line, then its usage
		require.Len(t, lines, 3)
		require.Equal(t, 1, strings.Count(lines[1], "default"), "the default of %s once: %q", flagName, lines[1])
	}
}
