package limit

import "time"

// Measure is one reading of what the worker uses: memory in use, in
// bytes, and the CPU time used since a fixed point, in seconds (only the
// difference between two readings means anything).
type Measure struct {
	Memory     int64
	CPUSeconds float64
}

// Rate is the CPU a pair of readings shows in use, in cores.
func Rate(before, after Measure, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return max(0, after.CPUSeconds-before.CPUSeconds) / elapsed.Seconds()
}
