package kinds

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluicehq/sluice/pkg/confine"
)

// ScratchEnv is the variable that tells an exec job its scratch directory.
const ScratchEnv = "SLUICE_SCRATCH_DIR"

// The exec kind runs on least privilege. An allow-listed program is still
// a program the operator trusts with whatever arguments a job gives it;
// what a job must not choose is anything that makes that program load or
// run other code, or pick which file a relative name means. So both the
// variables a job may set and the directories it may work in are allow
// lists the operator owns:
//
//   - env: only the names in SLUICE_WORKER_EXEC_ENV_ALLOW (PATH, LD_*,
//     BASH_ENV, PYTHONPATH, NODE_OPTIONS and friends stay out unless the
//     operator lists them);
//   - dir: after symlinks, inside the run's scratch directory (a relative
//     dir is taken from there) or under a root in SLUICE_WORKER_EXEC_DIRS.
//
// A job that asks for anything else fails input: without a retry.

// check applies the policy to a parsed spec and settles its working
// directory: the scratch directory when the job names none.
func (e *Execer) check(spec *ExecSpec, scratch string) error {
	for k := range spec.Env {
		if !slices.Contains(e.env, k) {
			return fmt.Errorf("exec: env name %q is not allowed (SLUICE_WORKER_EXEC_ENV_ALLOW)", k)
		}
	}
	if spec.Dir == "" {
		spec.Dir = scratch
		return nil
	}
	dir, err := e.resolveDir(spec.Dir, scratch)
	if err != nil {
		return err
	}
	spec.Dir = dir
	return nil
}

// resolveDir resolves dir (relative to scratch) through symlinks and
// requires it inside scratch or one of the allowed roots.
func (e *Execer) resolveDir(dir, scratch string) (string, error) {
	if !filepath.IsAbs(dir) {
		if scratch == "" {
			return "", fmt.Errorf("exec: dir %q is relative and the run has no scratch directory", dir)
		}
		dir = filepath.Join(scratch, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("exec: dir %q does not exist", dir)
		}
		return "", fmt.Errorf("exec: dir %q: %w", dir, err)
	}
	roots := e.dirs
	if scratch != "" {
		roots = append([]string{scratch}, roots...)
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue // a root that does not exist holds nothing
		}
		if confine.Within(real, r) {
			return real, nil
		}
	}
	return "", fmt.Errorf("exec: dir %q is outside the run's scratch directory and SLUICE_WORKER_EXEC_DIRS", dir)
}
