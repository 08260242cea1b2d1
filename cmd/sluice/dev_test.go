package main

import (
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
