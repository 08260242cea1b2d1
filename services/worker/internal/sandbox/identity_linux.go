package sandbox

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// DefaultLockDir is where the locks of run uids live: one file per uid, on
// a tmpfs that a reboot empties, shared by every worker of the host.
const DefaultLockDir = "/run/sluice/run-uids"

// pool hands out the uids of a range, each held host-wide by an exclusive
// lock (flock) on a file named after it: two workers of one host (or two
// in one process) never give a uid to two live runs, and a worker that
// died frees its uids with its locks (and its warden's).
type pool struct {
	r   Range
	dir string

	mu   sync.Mutex
	next uint32 // offset in r to try first
}

// openPool makes the lock directory (root only) and starts at a random
// place in the range, so workers sharing it seldom try the same uids.
func openPool(r Range, dir string) (*pool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: uid locks: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: uid locks: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &pool{r: r, dir: dir, next: binary.LittleEndian.Uint32(b[:]) % uint32(r.Len())}, nil
}

// acquire takes a free uid of the range and returns it with its lock
// (close the lock to free the uid).
func (p *pool) acquire() (uint32, *os.File, error) {
	p.mu.Lock()
	start := p.next
	p.mu.Unlock()
	n := uint32(p.r.Len())
	for i := uint32(0); i < n; i++ {
		off := (start + i) % n
		uid := p.r.First + off
		f, ok, err := lockFile(filepath.Join(p.dir, strconv.FormatUint(uint64(uid), 10)))
		if err != nil {
			return 0, nil, err
		}
		if ok {
			p.mu.Lock()
			p.next = (off + 1) % n
			p.mu.Unlock()
			return uid, f, nil
		}
	}
	return 0, nil, fmt.Errorf("sandbox: every uid of SLUICE_WORKER_RUN_UIDS (%s) is taken by a live run", p.r)
}

// lockFile opens path and takes an exclusive flock on it without waiting;
// false means another holder has it.
func lockFile(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("sandbox: uid lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("sandbox: uid lock %s: %w", path, err)
	}
	return f, true, nil
}
