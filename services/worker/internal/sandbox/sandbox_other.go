//go:build !linux

package sandbox

import (
	"os/exec"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// DefaultLockDir is where the locks of run uids live (unused here).
const DefaultLockDir = ""

// Options say how to build a Sandbox (unused outside Linux).
type Options struct {
	UIDs      Range
	LockDir   string
	Pids      int64
	Reach     []string
	Want      contracts.Isolation
	Shared    []string
	OnExpired func(run string)
}

// Sandbox gives runs no walls outside Linux.
type Sandbox struct{}

// New returns a Sandbox with no isolation.
func New(Options) *Sandbox { return &Sandbox{} }

// Isolation is none.
func (s *Sandbox) Isolation() contracts.Isolation { return contracts.IsolationNone }

// Reason says why.
func (s *Sandbox) Reason() string { return "runs are walled off on Linux only" }

// Close does nothing.
func (s *Sandbox) Close() error { return nil }

// Dirs are a run's own directories.
type Dirs struct{ Scratch, Inputs string }

// Box is one run's walls: none here.
type Box struct{}

// Open returns no box: runs start as they are.
func (s *Sandbox) Open(string, Dirs) (*Box, error) { return nil, nil }

// UID is 0.
func (b *Box) UID() uint32 { return 0 }

// Path is real.
func (b *Box) Path(real string) string { return real }

// Launch is not needed here.
func (b *Box) Launch(*exec.Cmd) (*Launch, error) { return nil, nil }

// Renew does nothing.
func (b *Box) Renew(time.Duration) {}

// Close does nothing.
func (b *Box) Close() {}

// Launch is a run's program on its way through the launcher: never here.
type Launch struct{}

// Abort does nothing.
func (l *Launch) Abort() {}

// Begin does nothing.
func (l *Launch) Begin(limit.Target, []limit.Rlimit, bool) error { return nil }

// LaunchError is why the launcher could not start a run's program.
type LaunchError struct{ Reason string }

// Error implements error.
func (e *LaunchError) Error() string { return e.Reason }

// Harden does nothing outside Linux.
func Harden() error { return nil }
