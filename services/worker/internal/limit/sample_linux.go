package limit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sampler measures the worker with its jobs: its own cgroup when it has
// one (v2 memory.current and cpu.stat; v1 memory.usage_in_bytes and
// cpuacct.usage), memory without the page cache the kernel can drop
// (inactive files), else the whole machine (/proc/meminfo MemTotal −
// MemAvailable, /proc/stat busy time).
type Sampler struct {
	h hostFS
	// memDir and cpuFile are where the cgroup readings come from ("" =
	// the machine's); v2 says which layout.
	memDir, cpuFile string
	v2              bool
}

// NewSampler finds the worker's cgroup files once.
func NewSampler() *Sampler {
	s := &Sampler{h: realHost}
	m, err := s.h.readMounts()
	if err != nil {
		return s
	}
	self, err := s.h.readSelf(m)
	if err != nil {
		return s
	}
	switch {
	case self.v2 != "" && exists(filepath.Join(self.v2, "memory.current")):
		s.memDir, s.v2 = self.v2, true
		if exists(filepath.Join(self.v2, "cpu.stat")) {
			s.cpuFile = filepath.Join(self.v2, "cpu.stat")
		}
	case self.v1["memory"] != "":
		s.memDir = self.v1["memory"]
		if d := self.v1["cpuacct"]; d != "" && exists(filepath.Join(d, "cpuacct.usage")) {
			s.cpuFile = filepath.Join(d, "cpuacct.usage")
		}
	}
	return s
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Sample reads the worker's use now.
func (s *Sampler) Sample() (Measure, error) {
	var m Measure
	var err error
	if m.Memory, err = s.memory(); err != nil {
		return m, err
	}
	m.CPUSeconds, err = s.cpu()
	return m, err
}

func (s *Sampler) memory() (int64, error) {
	if s.memDir != "" {
		name, inactive := "memory.usage_in_bytes", "total_inactive_file"
		if s.v2 {
			name, inactive = "memory.current", "inactive_file"
		}
		if used, ok := readInt(filepath.Join(s.memDir, name)); ok {
			if v, ok := readKeyed(filepath.Join(s.memDir, "memory.stat"), inactive); ok && v < used {
				used -= v
			}
			return used, nil
		}
	}
	total, ok1 := s.h.meminfo("MemTotal")
	avail, ok2 := s.h.meminfo("MemAvailable")
	if !ok1 || !ok2 {
		return 0, errors.New("limit: no memory reading (cgroup or /proc/meminfo)")
	}
	return total - avail, nil
}

func (s *Sampler) cpu() (float64, error) {
	if s.cpuFile != "" {
		if s.v2 {
			if v, ok := readKeyed(s.cpuFile, "usage_usec"); ok {
				return float64(v) / 1e6, nil
			}
		} else if v, ok := readInt(s.cpuFile); ok {
			return float64(v) / 1e9, nil
		}
	}
	data, err := os.ReadFile(filepath.Join(s.h.proc, "stat"))
	if err != nil {
		return 0, errors.New("limit: no CPU reading (cgroup or /proc/stat)")
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("limit: /proc/stat has no cpu line")
	}
	// user nice system idle iowait irq softirq steal: busy is all but
	// idle and iowait, in clock ticks (USER_HZ, 100 on Linux).
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, errors.New("limit: /proc/stat: bad number")
		}
		busy += n
	}
	return busy / 100, nil
}
