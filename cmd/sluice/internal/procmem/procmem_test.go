package procmem

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPeakIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status string
		want   int64
	}{
		{"Name:\tsluice\nVmPeak:\t  900 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n", 12345},
		{"VmHWM:\t0 kB\n", 0},
		{"Name:\tkernel thread\n", 0},
		{"", 0},
	} {
		require.Equal(t, tc.want, peakIn(tc.status), tc.status)
	}
}

func TestFiguresIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status string
		want   Figures
	}{
		{"Name:\tsluice\nVmPeak:\t  900 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n", Figures{Peak: 12345, Now: 100}},
		{"VmRSS:\t7 kB\n", Figures{Now: 7}},
		{"VmHWM:\tlots kB\n", Figures{}},
		{"", Figures{}},
	} {
		require.Equal(t, tc.want, figuresIn(tc.status), tc.status)
	}
}

func TestPeakRSS(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		require.Zero(t, PeakRSS(os.Getpid()))
		require.Zero(t, RSS(os.Getpid()))
		return
	}
	require.Positive(t, PeakRSS(os.Getpid()))
	require.Positive(t, RSS(os.Getpid()))
	require.LessOrEqual(t, RSS(os.Getpid()), PeakRSS(os.Getpid()))
	require.Zero(t, PeakRSS(-1), "no such process")
	require.Equal(t, Figures{}, Read(-1))
}
