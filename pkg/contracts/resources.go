package contracts

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Resources is what a job needs, or what a worker has: CPU in cores (0.5
// is half a core) and memory in bytes. A job's declaration is optional;
// the worker gives a job without one its kind's default
// (SLUICE_WORKER_KIND_RESOURCES), else one slot's share of its capacity.
//
// JSON: {"cpu": 0.5, "memory": "512MiB"}; memory is a string with an IEC
// unit (KiB, MiB, GiB, TiB) or a plain byte count, or a JSON number of
// bytes. Both members are optional (0: none of it).
type Resources struct {
	// CPU is in cores.
	CPU float64
	// Memory is in bytes.
	Memory int64
}

// Bounds of a declaration: far above any machine, so only a mistake (a
// unit missing or doubled) passes them.
const (
	MaxCPU    = 4096
	MaxMemory = 1 << 50 // 1 PiB
)

// cpuQuantum is the finest CPU share: sums and differences are rounded to
// it, so that 0.1 + 0.2 fits in 0.3.
const cpuQuantum = 1e-6

// memoryUnits are the IEC units a memory amount may carry, largest first.
var memoryUnits = []struct {
	name string
	size int64
}{
	{"TiB", 1 << 40},
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// IsZero reports whether r declares nothing.
func (r Resources) IsZero() bool { return r.CPU == 0 && r.Memory == 0 }

// Fits reports whether r fits in free: each of its amounts is at most
// free's (CPU within cpuQuantum).
func (r Resources) Fits(free Resources) bool {
	return r.CPU <= free.CPU+cpuQuantum/2 && r.Memory <= free.Memory
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPU: roundCPU(r.CPU + o.CPU), Memory: r.Memory + o.Memory}
}

// Sub returns r − o; an amount may go below zero (a worker over its
// capacity has less than nothing free).
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPU: roundCPU(r.CPU - o.CPU), Memory: r.Memory - o.Memory}
}

// Clamp returns r with negative amounts raised to zero.
func (r Resources) Clamp() Resources {
	return Resources{CPU: max(r.CPU, 0), Memory: max(r.Memory, 0)}
}

// Div returns r shared n ways (one slot's share of a capacity); n < 1 is 1.
func (r Resources) Div(n int) Resources {
	if n < 1 {
		n = 1
	}
	return Resources{CPU: roundCPU(r.CPU / float64(n)), Memory: r.Memory / int64(n)}
}

func roundCPU(v float64) float64 { return math.Round(v/cpuQuantum) * cpuQuantum }

// Validate checks a declaration: no negative, NaN or infinite amount,
// none above MaxCPU or MaxMemory. Its error is a *FieldError naming the
// member under field ("resources.cpu").
func (r Resources) Validate(field string) error {
	switch {
	case math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0):
		return &FieldError{Field: field + ".cpu", Reason: "must be a finite number of cores"}
	case r.CPU < 0:
		return &FieldError{Field: field + ".cpu", Reason: fmt.Sprintf("%g is negative", r.CPU)}
	case r.CPU > MaxCPU:
		return &FieldError{Field: field + ".cpu", Reason: fmt.Sprintf("%g cores is more than %d", r.CPU, MaxCPU)}
	case r.Memory < 0:
		return &FieldError{Field: field + ".memory", Reason: fmt.Sprintf("%d bytes is negative", r.Memory)}
	case r.Memory > MaxMemory:
		return &FieldError{Field: field + ".memory", Reason: fmt.Sprintf("%s is more than %s", FormatMemory(r.Memory), FormatMemory(MaxMemory))}
	}
	return nil
}

// String formats r as ParseResources reads it: "cpu=0.5,memory=512MiB".
func (r Resources) String() string {
	return "cpu=" + strconv.FormatFloat(r.CPU, 'f', -1, 64) + ",memory=" + FormatMemory(r.Memory)
}

// FormatMemory writes bytes with the largest IEC unit that divides it
// exactly ("512MiB", "1536KiB"), or as a plain count ("1000").
func FormatMemory(bytes int64) string {
	if bytes == 0 {
		return "0"
	}
	for _, u := range memoryUnits[:len(memoryUnits)-1] {
		if bytes%u.size == 0 {
			return strconv.FormatInt(bytes/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(bytes, 10)
}

// ParseMemory reads an amount of memory: a non-negative number with an
// optional IEC unit (KiB, MiB, GiB, TiB, or B), "1.5GiB" included; the
// result is rounded down to a byte. Its errors say what is wrong with s.
func ParseMemory(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, size := t, int64(1)
	for _, u := range memoryUnits {
		if strings.HasSuffix(t, u.name) {
			num, size = strings.TrimSpace(strings.TrimSuffix(t, u.name)), u.size
			break
		}
	}
	if num == "" {
		return 0, fmt.Errorf("%q is not an amount of memory (want a byte count or a number with KiB, MiB, GiB or TiB)", s)
	}
	for _, c := range num {
		if (c < '0' || c > '9') && c != '.' {
			return 0, fmt.Errorf("%q is not an amount of memory (want a byte count or a number with KiB, MiB, GiB or TiB)", s)
		}
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n > MaxMemory/size {
			return 0, fmt.Errorf("%q is more than %s", s, FormatMemory(MaxMemory))
		}
		return n * size, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an amount of memory (want a byte count or a number with KiB, MiB, GiB or TiB)", s)
	}
	if v := f * float64(size); v > MaxMemory {
		return 0, fmt.Errorf("%q is more than %s", s, FormatMemory(MaxMemory))
	}
	return int64(f * float64(size)), nil
}

// ParseResources reads the configuration form of a declaration,
// "cpu=2,memory=1GiB" (either member may be left out), and validates it.
func ParseResources(s string) (Resources, error) {
	var r Resources
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || value == "" {
			return r, fmt.Errorf("%q: want name=value (cpu=2, memory=1GiB)", part)
		}
		if seen[name] {
			return r, fmt.Errorf("%s is given twice", name)
		}
		seen[name] = true
		switch name {
		case "cpu":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return r, fmt.Errorf("cpu: %q is not a number of cores", value)
			}
			r.CPU = v
		case "memory":
			v, err := ParseMemory(value)
			if err != nil {
				return r, fmt.Errorf("memory: %w", err)
			}
			r.Memory = v
		default:
			return r, fmt.Errorf("%q is not a resource (have cpu, memory)", name)
		}
	}
	if err := r.Validate("resources"); err != nil {
		return r, err
	}
	return r, nil
}

// resourcesJSON is the wire form of Resources.
type resourcesJSON struct {
	CPU    *float64        `json:"cpu,omitempty"`
	Memory json.RawMessage `json:"memory,omitempty"`
}

// MarshalJSON writes {"cpu":0.5,"memory":"512MiB"}, leaving out zero
// members.
func (r Resources) MarshalJSON() ([]byte, error) {
	var w resourcesJSON
	if r.CPU != 0 {
		cpu := r.CPU
		w.CPU = &cpu
	}
	if r.Memory != 0 {
		w.Memory = json.RawMessage(strconv.Quote(FormatMemory(r.Memory)))
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a declaration strictly (no unknown member) and
// validates it; its errors name the member ("memory: …").
func (r *Resources) UnmarshalJSON(data []byte) error {
	var w resourcesJSON
	if err := strictInto(data, &w); err != nil {
		return err
	}
	var out Resources
	if w.CPU != nil {
		out.CPU = *w.CPU
	}
	if len(w.Memory) > 0 && string(w.Memory) != "null" {
		m, err := decodeMemory(w.Memory)
		if err != nil {
			return newInnerDecodeError(data, &DecodeError{Path: "memory", Reason: err.Error()})
		}
		out.Memory = m
	}
	if err := out.Validate(""); err != nil {
		fe := err.(*FieldError)
		return newInnerDecodeError(data, &DecodeError{Path: strings.TrimPrefix(fe.Field, "."), Reason: fe.Reason})
	}
	*r = out
	return nil
}

// decodeMemory reads memory's JSON: a string ParseMemory reads, or a
// whole non-negative number of bytes.
func decodeMemory(raw json.RawMessage) (int64, error) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("not a string")
		}
		return ParseMemory(s)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("expected a byte count or a string like \"512MiB\", got %s", describeRaw(raw))
	}
	if n < 0 {
		return 0, fmt.Errorf("%d bytes is negative", n)
	}
	return n, nil
}

// describeRaw names a JSON value's type for an error.
func describeRaw(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number that is not a whole count of bytes"
	}
}
