// Package procmem reads a process's memory figures from Linux's /proc, for
// the benchmarks and the chaos harness that report them.
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the resident memory high-water mark (VmHWM) of process pid in
// KiB, or 0 when /proc does not say (not Linux, or the process is gone).
func PeakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return peakIn(string(data))
}

// peakIn is the VmHWM of a /proc status file's text in KiB, or 0.
func peakIn(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}
