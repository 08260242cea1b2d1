package limit

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// hogScript doubles a string until it holds 256 MiB: far past a 64 MiB
// limit, with every byte touched.
const hogScript = `BEGIN { s = "x"; for (i = 0; i < 28; i++) s = s s; print length(s) }`

func uniqueName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

// cgroupEnforcer is an Enforcer with cgroups, or skips the test saying why.
func cgroupEnforcer(t *testing.T) *Enforcer {
	t.Helper()
	l := New(Options{Name: uniqueName(t)})
	if l.Mechanism() != contracts.LimitCgroupV1 && l.Mechanism() != contracts.LimitCgroupV2 {
		t.Skipf("no cgroup can be made here (%s): %s", l.Mechanism(), l.Reason())
	}
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func run(t *testing.T, l *Enforcer, r contracts.Resources, name string, argv ...string) (Outcome, error, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j, err := l.Start(cmd, name, r, 0)
	require.NoError(t, err)
	werr := cmd.Wait()
	return j.Finish(), werr, out.String()
}

// TestCgroupHoldsTheProcessFromItsStart: the program is inside the run's
// cgroup when it runs its first instruction, and the cgroup is gone
// after.
func TestCgroupHoldsTheProcessFromItsStart(t *testing.T) {
	t.Parallel()
	l := cgroupEnforcer(t)
	o, err, out := run(t, l, contracts.Resources{CPU: 1, Memory: 64 << 20}, "r1", "cat", "/proc/self/cgroup")
	require.NoError(t, err)
	require.Contains(t, out, "/r1\n", "the program reads its own cgroup")
	for c, parent := range l.v1 {
		require.Contains(t, out, ":"+c+":", "in the run's %s cgroup under %s", c, parent)
	}
	if l.v1["freezer"] != "" {
		require.Regexp(t, `freezer:/sluice-[^\n]*/r1\n`, out)
	}
	require.Equal(t, l.Mechanism(), o.Usage.Mechanism)
	require.False(t, o.OverMemory)
	require.Positive(t, o.Usage.PeakMemory)
	for _, parent := range l.v1 {
		require.NoDirExists(t, filepath.Join(parent, "r1"))
	}
	// The worker's own threads stayed where they were.
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	require.NotContains(t, string(self), "/r1")
}

// TestCgroupKillsAHogAndNothingElse: a program past its memory is killed
// and reported; the worker's process lives on.
func TestCgroupKillsAHogAndNothingElse(t *testing.T) {
	t.Parallel()
	l := cgroupEnforcer(t)
	o, err, _ := run(t, l, contracts.Resources{Memory: 64 << 20}, "hog", "awk", hogScript)
	require.Error(t, err)
	require.True(t, o.OverMemory, "outcome %+v", o)
	require.GreaterOrEqual(t, o.Usage.PeakMemory, int64(60<<20))
	o, err, _ = run(t, l, contracts.Resources{Memory: 64 << 20}, "small", "sh", "-c", "echo ok")
	require.NoError(t, err)
	require.False(t, o.OverMemory)
}

// TestCgroupKillReachesEscapedGrandchildren: a grandchild that left the
// process group (setsid) is still killed with the run.
func TestCgroupKillReachesEscapedGrandchildren(t *testing.T) {
	t.Parallel()
	l := cgroupEnforcer(t)
	cmd := exec.Command("sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j, err := l.Start(cmd, "tree", contracts.Resources{Memory: 64 << 20}, 0)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the grandchild runs after its parent left")
	j.Finish()
	require.False(t, alive(pid), "grandchild %d outlived its run", pid)
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestRlimitFallback runs everywhere: without cgroups, a program gets its
// memory as RLIMIT_AS, so the hog cannot allocate past it, while a small
// program runs.
func TestRlimitFallback(t *testing.T) {
	t.Parallel()
	l := New(Options{Name: uniqueName(t), Want: contracts.LimitRlimit})
	require.Equal(t, contracts.LimitRlimit, l.Mechanism())
	o, err, out := run(t, l, contracts.Resources{CPU: 1, Memory: 64 << 20}, "hog", "awk", hogScript)
	require.Error(t, err)
	require.True(t, OutOfMemoryText(out), "output %q", out)
	require.Equal(t, contracts.LimitRlimit, o.Usage.Mechanism)
	require.Less(t, o.Usage.PeakMemory, int64(64<<20))
	o, err, out = run(t, l, contracts.Resources{CPU: 1, Memory: 64 << 20}, "small", "sh", "-c", "echo ok")
	require.NoError(t, err)
	require.Equal(t, "ok\n", out)
	require.False(t, o.OverMemory)
	require.NoError(t, l.Close())
}

// TestCapacityFromCgroups reads a worker's capacity from its cgroups, and
// falls back to the machine's.
func TestCapacityFromCgroups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  contracts.Resources
	}{
		{"v1 limits", map[string]string{
			"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000",
			"memory/memory.limit_in_bytes": "2147483648",
		}, contracts.Resources{CPU: 1.5, Memory: 2 << 30}},
		{"v1 unlimited", map[string]string{
			"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
			"memory/memory.limit_in_bytes": "9223372036854771712",
		}, contracts.Resources{CPU: 64, Memory: 8 << 30}},
		{"v2 limits", map[string]string{"unified/cpu.max": "50000 100000", "unified/memory.max": "536870912"},
			contracts.Resources{CPU: 0.5, Memory: 512 << 20}},
		{"v2 unlimited", map[string]string{"unified/cpu.max": "max 100000", "unified/memory.max": "max"},
			contracts.Resources{CPU: 64, Memory: 8 << 30}},
	} {
		root := t.TempDir()
		proc := filepath.Join(root, "proc")
		require.NoError(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755))
		mountinfo := "" +
			"31 30 0:28 / " + root + "/cpu rw - cgroup cgroup rw,cpu\n" +
			"34 30 0:31 / " + root + "/memory rw - cgroup cgroup rw,memory\n" +
			"40 30 0:37 / " + root + "/unified rw - cgroup2 cgroup2 rw\n"
		require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(mountinfo), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "cgroup"), []byte("4:memory:/\n1:cpu:/\n0::/\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, "meminfo"), []byte("MemTotal:       8388608 kB\nMemFree: 1 kB\n"), 0o644))
		for name, body := range tc.files {
			p := filepath.Join(root, name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(body+"\n"), 0o644))
		}
		got := hostFS{proc: proc, cpus: 64}.capacity()
		require.Equal(t, tc.want, got, tc.name)
	}
}

// TestSelfIsTheCallingThreads: the worker's own cgroups are read from
// the calling thread, not the thread group leader, which may be the
// thread an enforcer moved into a run's cgroups to start it (then
// /proc/self/cgroup names the run's, and an enforcer created at that
// moment nested its cgroups in the run's, which could then never be
// removed); /proc/self/cgroup is the fallback where the kernel has no
// /proc/thread-self.
func TestSelfIsTheCallingThreads(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	proc := filepath.Join(root, "proc")
	m := mounts{v1: map[string]string{"memory": filepath.Join(root, "memory")}}
	write := func(dir, body string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, dir), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, dir, "cgroup"), []byte(body), 0o644))
	}
	write("self", "4:memory:/worker/run-1\n")
	s, err := hostFS{proc: proc}.readSelf(m)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "memory", "worker", "run-1"), s.v1["memory"], "no thread-self: the process's")
	write("thread-self", "4:memory:/worker\n")
	s, err = hostFS{proc: proc}.readSelf(m)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "memory", "worker"), s.v1["memory"], "the calling thread's")
}

// TestStaleRunCgroupIsReplaced: a run's cgroup left behind by a worker of
// the same id that died does not stop the run.
func TestStaleRunCgroupIsReplaced(t *testing.T) {
	t.Parallel()
	l := cgroupEnforcer(t)
	parents := []string{l.v2}
	for _, p := range l.v1 {
		parents = append(parents, p)
	}
	for _, p := range parents {
		if p != "" {
			require.NoError(t, os.Mkdir(filepath.Join(p, "again"), 0o755))
		}
	}
	_, err, out := run(t, l, contracts.Resources{Memory: 64 << 20}, "again", "sh", "-c", "echo ok")
	require.NoError(t, err)
	require.Equal(t, "ok\n", out)
}

// TestParentsAreTheirOwn: two Enforcers of one worker id (one process may
// run several workers) keep apart, and one's Close leaves the other's runs
// alone; a parent left by a dead process of that id is swept.
func TestParentsAreTheirOwn(t *testing.T) {
	t.Parallel()
	name := uniqueName(t)
	a := New(Options{Name: name})
	if a.Mechanism() != contracts.LimitCgroupV1 && a.Mechanism() != contracts.LimitCgroupV2 {
		t.Skipf("no cgroup can be made here (%s): %s", a.Mechanism(), a.Reason())
	}
	b := New(Options{Name: name})
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	require.NoError(t, a.Close())
	_, err, out := run(t, b, contracts.Resources{Memory: 64 << 20}, "r", "sh", "-c", "echo ok")
	require.NoError(t, err)
	require.Equal(t, "ok\n", out)

	// A parent of a dead process (pid 2^22+1 is above pid_max's default
	// of 2^22) and one of a live process of this id.
	dirs := []string{b.v2}
	for _, d := range b.v1 {
		dirs = append(dirs, d)
	}
	var dead, live []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		up := filepath.Dir(d)
		dead = append(dead, filepath.Join(up, "sluice-"+name+".4194305.abcdef"))
		live = append(live, filepath.Join(up, "sluice-"+name+"."+strconv.Itoa(os.Getpid())+".abcdef"))
	}
	for _, d := range append(append([]string{}, dead...), live...) {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Mkdir(filepath.Join(d, "run"), 0o755))
	}
	c := New(Options{Name: name})
	require.NoError(t, c.Close())
	for _, d := range dead {
		require.NoDirExists(t, d)
	}
	for _, d := range live {
		require.DirExists(t, d)
		require.NoError(t, os.Remove(filepath.Join(d, "run")))
		require.NoError(t, os.Remove(d))
	}
}

// BenchmarkRun is the cost a mechanism adds to one exec run of a program
// that does nothing: start, wait, finish (read the usage, kill what is
// left, remove the cgroup).
func BenchmarkRun(b *testing.B) {
	for _, want := range []contracts.LimitMechanism{contracts.LimitNone, contracts.LimitRlimit, ""} {
		var buf [4]byte
		_, _ = rand.Read(buf[:])
		l := New(Options{Name: "bench-" + hex.EncodeToString(buf[:]), Want: want})
		defer l.Close()
		b.Run(string(l.Mechanism()), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				cmd := exec.Command("true")
				j, err := l.Start(cmd, "r"+strconv.Itoa(i), contracts.Resources{CPU: 1, Memory: 64 << 20}, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				_ = cmd.Wait()
				j.Finish()
			}
		})
	}
}
