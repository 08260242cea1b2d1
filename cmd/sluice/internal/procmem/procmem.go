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
func PeakRSS(pid int) int64 { return Read(pid).Peak }

// RSS is the resident memory (VmRSS) of process pid now, in KiB, or 0 when
// /proc does not say.
func RSS(pid int) int64 { return Read(pid).Now }

// Figures are one reading of a process's resident memory, in KiB.
type Figures struct {
	// Peak is the high-water mark since the process started (VmHWM).
	Peak int64
	// Now is the resident memory at the time of reading (VmRSS).
	Now int64
}

// Read reads the resident memory figures of process pid in one pass over
// its /proc status file; zeros when /proc does not say.
func Read(pid int) Figures {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Figures{}
	}
	return figuresIn(string(data))
}

// peakIn is the VmHWM of a /proc status file's text in KiB, or 0.
func peakIn(status string) int64 { return figuresIn(status).Peak }

// figuresIn reads VmHWM and VmRSS out of a /proc status file's text.
func figuresIn(status string) Figures {
	var f Figures
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f.Peak = kib(rest)
		} else if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f.Now = kib(rest)
		}
	}
	return f
}

// kib parses a status value such as "\t  12345 kB"; 0 when it is not one.
func kib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n
}
