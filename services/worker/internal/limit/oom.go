package limit

import "strings"

// oomWords are what programs print when an allocation fails: the C
// library's ENOMEM, awk, Python, C++, the JVM and the Go runtime.
var oomWords = []string{
	"out of memory", "cannot allocate memory", "memoryerror", "bad_alloc",
	"outofmemoryerror", "failed to reserve", "memory exhausted",
}

// OutOfMemoryText reports whether a failed program's output says it ran
// out of memory: how a run under RLIMIT_AS, whose allocations fail rather
// than being killed, is told apart from any other failure (best effort:
// the kernel says nothing there).
func OutOfMemoryText(output string) bool {
	low := strings.ToLower(output)
	for _, w := range oomWords {
		if strings.Contains(low, w) {
			return true
		}
	}
	return false
}
