package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/procmem"
)

// Proc is one service process: its name (e.g. "worker-2"), service kind and
// the pid of its current incarnation. Every incarnation and every freeze
// (SIGSTOP … SIGCONT) is remembered, so the checker can tell what a
// process could do when.
type Proc struct {
	Name    string
	Service string
	bin     string
	args    []string
	env     []string
	log     string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	started  time.Time
	workerID string
	// metricsURL is the /metrics of a scheduler, scraped before it is killed.
	metricsURL string
	lives      []Life
	frozen     *Span // the freeze in progress
	freezes    []Span
	held       bool // a fault is being applied to it: other faults keep off
	// transient: a spawned worker, which leaves when idle and is not
	// restarted.
	transient bool
}

// Life is one incarnation of a process: its pid, when it was started and
// when it was seen dead (zero while it runs).
type Life struct {
	PID        int
	Start, End time.Time
}

// Span is a time interval.
type Span struct{ From, To time.Time }

// Started is when the current incarnation was started.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: open log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	pid := cmd.Process.Pid
	p.lives = append(p.lives, Life{PID: pid, Start: p.started})
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		for i := range p.lives {
			if p.lives[i].PID == pid && p.lives[i].End.IsZero() {
				p.lives[i].End = time.Now()
			}
		}
		p.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// kill sends SIGKILL to the current incarnation's pid and waits for it. A
// stopped process dies too; its freeze ends with it.
func (p *Proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
	p.mu.Lock()
	if p.frozen != nil {
		p.frozen.To = time.Now()
		p.freezes = append(p.freezes, *p.frozen)
		p.frozen = nil
	}
	p.mu.Unlock()
}

// freeze sends SIGSTOP to the current incarnation and waits until the
// kernel shows it stopped, so the recorded start of the freeze is never
// before the process stopped running.
func (p *Proc) freeze() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.frozen != nil {
		return fmt.Errorf("chaos: freeze %s: not running", p.Name)
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("chaos: SIGSTOP %s: %w", p.Name, err)
	}
	for deadline := time.Now().Add(2 * time.Second); !stopped(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	p.frozen = &Span{From: time.Now()}
	return nil
}

// stopped reports whether /proc shows pid in the stopped state ("T").
func stopped(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// thaw ends the freeze: the end is recorded before SIGCONT is sent, so
// nothing the process does after it can predate the recorded end.
func (p *Proc) thaw() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		return nil
	}
	p.frozen.To = time.Now()
	p.freezes = append(p.freezes, *p.frozen)
	p.frozen = nil
	if p.cmd != nil {
		if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("chaos: SIGCONT %s: %w", p.Name, err)
		}
	}
	return nil
}

// alive reports whether the current incarnation is still running (a service
// may also exit by itself, e.g. on a fatal error).
func (p *Proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// hold reserves p for one fault; false when another fault has it.
func (p *Proc) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		return false
	}
	p.held = true
	return true
}

// unhold ends the reservation taken by hold.
func (p *Proc) unhold() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
}

// peakRSS is the current incarnation's resident memory high-water mark in
// KiB (VmHWM), or 0 when it is not running.
func (p *Proc) peakRSS() int64 {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return 0
	}
	return procmem.PeakRSS(cmd.Process.Pid)
}

// memory is the current incarnation's resident memory figures (VmHWM and
// VmRSS, KiB), or zeros when it is not running.
func (p *Proc) memory() procmem.Figures {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return procmem.Figures{}
	}
	return procmem.Read(cmd.Process.Pid)
}

// history returns copies of p's incarnations and finished freezes.
func (p *Proc) history() ([]Life, []Span) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Life(nil), p.lives...), append([]Span(nil), p.freezes...)
}
