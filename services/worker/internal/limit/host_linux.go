//go:build linux

package limit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// cgroupFS is where the kernel's files are read: the root of the proc
// and cgroup file systems ("" = the real ones).
type hostFS struct {
	// proc is the proc file system's mount point.
	proc string
	// cpus is the machine's cores (0: runtime.NumCPU).
	cpus int
}

var realHost = hostFS{proc: "/proc"}

// mounts are the cgroup hierarchies of the host as this process sees
// them: v2's directory (the unified hierarchy, "" when not mounted) and
// v1's by controller.
type mounts struct {
	v2 string
	v1 map[string]string
}

// selfCgroups are the worker's own cgroup directories: v2's ("" when it
// has none) and v1's by controller.
type selfCgroups struct {
	v2 string
	v1 map[string]string
}

// readMounts reads the cgroup mounts from mountinfo.
func (h hostFS) readMounts() (mounts, error) {
	data, err := os.ReadFile(filepath.Join(h.proc, "self", "mountinfo"))
	if err != nil {
		return mounts{}, fmt.Errorf("read mountinfo: %w", err)
	}
	m := mounts{v1: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		root, point, fstype := fields[3], unescapeMount(fields[4]), fields[sep+1]
		if root != "/" {
			continue // a bind of a sub-tree: paths would not match /proc/self/cgroup
		}
		switch fstype {
		case "cgroup2":
			m.v2 = point
		case "cgroup":
			for _, opt := range strings.Split(fields[len(fields)-1], ",") {
				switch opt {
				case "memory", "cpu", "cpuacct", "freezer", "pids":
					m.v1[opt] = point
				}
			}
		}
	}
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes (a space is \040).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readSelf reads which cgroups the process is in and turns them into
// directories of m. It reads the calling thread's (/proc/thread-self),
// not the thread group leader's (/proc/self): to start a run held in its
// cgroups from its first instruction, the enforcer moves one locked
// thread into them for the fork (cgroup v1), and when that thread is the
// leader, /proc/self/cgroup names the run's cgroups until it moves back.
// A worker that read it then would nest its own cgroups in a run's, which
// can then never be removed. The thread that reads is never the moved one:
// that thread runs nothing else while it is away.
func (h hostFS) readSelf(m mounts) (selfCgroups, error) {
	data, err := os.ReadFile(filepath.Join(h.proc, "thread-self", "cgroup"))
	if errors.Is(err, fs.ErrNotExist) { // kernels before 3.17
		data, err = os.ReadFile(filepath.Join(h.proc, "self", "cgroup"))
	}
	if err != nil {
		return selfCgroups{}, fmt.Errorf("read /proc/thread-self/cgroup: %w", err)
	}
	s := selfCgroups{v1: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			if m.v2 != "" {
				s.v2 = filepath.Join(m.v2, parts[2])
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if dir, ok := m.v1[c]; ok {
				s.v1[c] = filepath.Join(dir, parts[2])
			}
		}
	}
	return s, nil
}

// Capacity is what the worker may use: the limits of its own cgroup (v2
// cpu.max and memory.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us and
// memory.limit_in_bytes), else the machine's cores and MemTotal.
func Capacity() contracts.Resources {
	return realHost.capacity()
}

func (h hostFS) capacity() contracts.Resources {
	cpus := h.cpus
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	r := contracts.Resources{CPU: float64(cpus), Memory: h.memTotal()}
	m, err := h.readMounts()
	if err != nil {
		return r
	}
	self, err := h.readSelf(m)
	if err != nil {
		return r
	}
	if self.v2 != "" {
		if cpu, ok := readCPUMax(filepath.Join(self.v2, "cpu.max")); ok {
			r.CPU = min(r.CPU, cpu)
		}
		if mem, ok := readInt(filepath.Join(self.v2, "memory.max")); ok && mem > 0 {
			r.Memory = min(r.Memory, mem)
		}
	}
	if dir := self.v1["cpu"]; dir != "" {
		quota, ok1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		period, ok2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if ok1 && ok2 && quota > 0 && period > 0 {
			r.CPU = min(r.CPU, float64(quota)/float64(period))
		}
	}
	if dir := self.v1["memory"]; dir != "" {
		if mem, ok := readInt(filepath.Join(dir, "memory.limit_in_bytes")); ok && mem > 0 {
			r.Memory = min(r.Memory, mem)
		}
	}
	return r
}

// memTotal is MemTotal of /proc/meminfo in bytes (0 when unknown).
func (h hostFS) memTotal() int64 {
	v, _ := h.meminfo("MemTotal")
	return v
}

// meminfo reads one field of /proc/meminfo in bytes.
func (h hostFS) meminfo(field string) (int64, bool) {
	data, err := os.ReadFile(filepath.Join(h.proc, "meminfo"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, false
			}
			if len(f) > 1 && f[1] == "kB" {
				n <<= 10
			}
			return n, true
		}
	}
	return 0, false
}

// readCPUMax reads a v2 cpu.max ("max 100000" or "quota period") in
// cores; false when unlimited or unreadable.
func readCPUMax(path string) (float64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseFloat(f[0], 64)
	period, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0, false
	}
	return quota / period, true
}

// readInt reads a file holding one integer ("max" reads as unlimited:
// false). v1's "no limit" is a huge number, which min() then ignores.
func readInt(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// readKeyed reads one key of a "key value" file (memory.events, cpu.stat,
// memory.oom_control, memory.stat).
func readKeyed(path, key string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// writeFile writes a cgroup control file.
func writeFile(path, value string) error {
	err := os.WriteFile(path, []byte(value), 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// errNoCgroup says no cgroup mechanism is usable here; its text says why.
var errNoCgroup = errors.New("no cgroup")
