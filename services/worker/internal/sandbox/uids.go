package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultUIDs is the default range of run uids (SLUICE_WORKER_RUN_UIDS):
// far above the uids of users and of the usual container ranges.
const DefaultUIDs = "1900000000-1900065535"

// Range is an inclusive range of uids (and the same gids) for runs.
type Range struct {
	First, Last uint32
}

// IsZero reports whether the range is unset: runs keep the worker's uid.
func (r Range) IsZero() bool { return r == Range{} }

// Len is how many uids the range holds.
func (r Range) Len() int {
	if r.IsZero() {
		return 0
	}
	return int(r.Last-r.First) + 1
}

// String writes the range as ParseRange reads it.
func (r Range) String() string {
	if r.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// ParseRange reads "first-last" (inclusive; empty is the zero Range).
// Both ends must be unprivileged (above 0) and below 2^32-1, which means
// "no change" to the system calls that set ids.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Range{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("%q is not first-last", s)
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return Range{}, fmt.Errorf("%q: both ends must be uids (0-4294967294)", s)
	case first == 0:
		return Range{}, fmt.Errorf("%q: uid 0 is root, never a run's", s)
	case last < first:
		return Range{}, fmt.Errorf("%q: the last uid is below the first", s)
	case last >= 1<<32-1:
		return Range{}, fmt.Errorf("%q: 4294967295 is not a uid", s)
	}
	return Range{First: uint32(first), Last: uint32(last)}, nil
}
