package contracts

import (
	"strconv"
	"strings"
)

// Release is the version of this source tree: what a worker announces
// unless SLUICE_WORKER_VERSION says otherwise.
const Release = "0.12.0"

// CompareVersions orders two dotted release versions ("1.4.2", "v1.10"):
// -1, 0 or +1. Missing parts count as 0; a pre-release or build suffix
// ("-rc1", "+abc") is ignored. A part that is not a number counts as 0, so
// a version that is not a release ("dev") is older than every release.
func CompareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

func versionParts(v string) []int {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			n = 0
		}
		out = append(out, n)
	}
	return out
}
