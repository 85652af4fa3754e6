// Package proc runs a child process that may be killed with SIGKILL at any
// moment, and waits for it exactly once: the process handling shared by the
// crash tests (internal/crashtest) and runner verify --chaos. It imports no
// test code.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a started child process.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process ended; err is set then
	err  error
}

// Start starts cmd, and a goroutine that waits for it and ends with it.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err waits for the process to end and returns its exit (nil: exit 0).
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Ended reports, without waiting, whether the process ended, and its exit.
func (p *Process) Ended() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL, unless the process ended already, and waits for it
// to end.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill pid %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}

// KillAfter kills the process after d. It reports false, without killing,
// when the process ended first (err is then its exit).
func (p *Process) KillAfter(d time.Duration) (killed bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return false, p.err
	case <-t.C:
	}
	return true, p.Kill()
}

// WaitFor waits up to d for the process to end and returns its exit;
// after d it kills the process and reports false.
func (p *Process) WaitFor(d time.Duration) (exit error, ended bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err, true
	case <-t.C:
	}
	return p.Kill(), false
}
