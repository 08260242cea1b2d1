package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Per-run scratch directories. Every run gets a fresh directory, removed
// when the run ends whatever the outcome:
//
//	<SLUICE_WORKER_SCRATCH_DIR>/<worker id>/<job id>-<claim>
//
// A run with pinned inputs also gets a directory of its own copies of
// them beside it, removed as soon as its handler returned:
//
//	<SLUICE_WORKER_SCRATCH_DIR>/<worker id>/<job id>-<claim>.inputs-<random>
//
// A worker holds an exclusive lock (flock) on <worker id>.lock beside its
// folder while it lives. On start it empties its own folder (it has no
// live run yet) and removes the folders of workers whose lock it can take:
// their process is gone, killed or not, so nothing they left behind is in
// use. Several workers may share one scratch root.

// scratchUsagePeriod is how often a run's scratch usage is measured when
// SLUICE_WORKER_MAX_SCRATCH_BYTES bounds it.
const scratchUsagePeriod = 500 * time.Millisecond

// scratch is one worker's part of the scratch root.
type scratch struct {
	root string // the worker's own folder
	lock *os.File
}

// openScratch takes the worker's lock under root, empties its folder and
// removes what dead workers left.
func openScratch(root, workerID string) (*scratch, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	lock, ok, err := tryLock(filepath.Join(root, workerID+".lock"))
	if err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("scratch: %s: another live worker uses the id %q", root, workerID)
	}
	s := &scratch{root: filepath.Join(root, workerID), lock: lock}
	if err := os.RemoveAll(s.root); err != nil {
		_ = s.close()
		return nil, fmt.Errorf("scratch: empty %s: %w", s.root, err)
	}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		_ = s.close()
		return nil, fmt.Errorf("scratch: %w", err)
	}
	sweepDead(root, workerID)
	return s, nil
}

// sweepDead removes the folders of the workers under root whose lock is
// free. Best effort: what it cannot remove now, the next start will.
func sweepDead(root, self string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == self {
			continue
		}
		lockPath := filepath.Join(root, e.Name()+".lock")
		f, ok, err := tryLock(lockPath)
		if err != nil || !ok {
			continue // alive (or not ours to judge)
		}
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
		_ = os.Remove(lockPath)
		_ = f.Close()
	}
}

// tryLock opens path and takes an exclusive flock on it without waiting;
// false means another process holds it.
func tryLock(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, true, nil
}

// share lets other uids through the worker's folder (not list it): runs
// with a uid of their own reach their directories in it by path.
func (s *scratch) share() error {
	if err := os.Chmod(s.root, 0o711); err != nil {
		return fmt.Errorf("scratch: %w", err)
	}
	return nil
}

// make creates the fresh directory of one run.
func (s *scratch) make(l contracts.Lease) (string, error) {
	dir := filepath.Join(s.root, l.JobID+"-"+strconv.FormatInt(l.Claim, 10))
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("scratch: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("scratch: %w", err)
	}
	return dir, nil
}

// makeInputs creates the directory of one run's input copies, beside the
// scratch directories: <job id>-<claim>.inputs-<random> (a job id has no
// dot, so it is never a scratch directory's name, and two runs of one
// attempt never share it).
func (s *scratch) makeInputs(l contracts.Lease) (string, error) {
	dir, err := os.MkdirTemp(s.root, l.JobID+"-"+strconv.FormatInt(l.Claim, 10)+".inputs-*")
	if err != nil {
		return "", fmt.Errorf("scratch: %w", err)
	}
	return dir, nil
}

// remove deletes a run's directory and everything in it.
func (s *scratch) remove(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("scratch: remove %s: %w", dir, err)
	}
	return nil
}

// close releases the worker's lock and removes its folder.
func (s *scratch) close() error {
	err := os.RemoveAll(s.root)
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// errScratchFull is the cause of a run stopped for using more scratch
// space than SLUICE_WORKER_MAX_SCRATCH_BYTES.
var errScratchFull = errors.New("scratch directory over its limit")

// watchUsage measures dir every scratchUsagePeriod until ctx ends and
// calls over once when it holds more than limit bytes.
func watchUsage(ctx context.Context, dir string, limit int64, over func(used int64)) {
	t := time.NewTicker(scratchUsagePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if used := usage(dir); used > limit {
			over(used)
			return
		}
	}
}

// usage is how many bytes the regular files under dir hold.
func usage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// runScratch is one run's scratch directory, made on first use (most runs
// never ask for one: making and removing a directory per run costs more
// than a no-op job itself).
type runScratch struct {
	w   *Worker
	ctx context.Context
	t   *task

	once      sync.Once
	dir       string
	err       error
	stopWatch context.CancelFunc
}

// newRunScratch prepares t's scratch directory without making it.
func (w *Worker) newRunScratch(ctx context.Context, t *task) *runScratch {
	return &runScratch{w: w, ctx: ctx, t: t}
}

// get makes the directory on the first call (and starts watching its
// usage when SLUICE_WORKER_MAX_SCRATCH_BYTES bounds it) and returns it.
func (r *runScratch) get() (string, error) {
	r.once.Do(func() {
		r.dir, r.err = r.w.scratch.make(r.t.lease)
		limit := r.w.cfg.MaxScratchBytes
		if r.err != nil || limit <= 0 {
			return
		}
		wctx, stop := context.WithCancel(r.ctx)
		r.stopWatch = stop
		go watchUsage(wctx, r.dir, limit, func(used int64) {
			r.t.cancel(&contracts.ClassedError{Class: contracts.ClassHandler, Err: fmt.Errorf(
				"%w: %d bytes, SLUICE_WORKER_MAX_SCRATCH_BYTES is %d", errScratchFull, used, limit)})
		})
	})
	return r.dir, r.err
}

// remove deletes the directory if it was made.
func (r *runScratch) remove(t *task) {
	r.once.Do(func() {}) // no directory after this
	if r.stopWatch != nil {
		r.stopWatch()
	}
	if r.dir == "" {
		return
	}
	if err := r.w.scratch.remove(r.dir); err != nil {
		t.log.Warn().Err(err).Msg("scratch directory not removed")
	}
}
