// Package crashtest is the scaffolding shared by process-level crash tests:
// the test binary re-executes itself as the process under test, which the
// test kills with SIGKILL at seeded random moments, and every randomized
// test takes its seed from a flag or the clock and prints it.
package crashtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/proc"
)

// Seed returns flagSeed, or a seed from the clock when it is 0, and logs it
// with the flag that repeats the run.
func Seed(t testing.TB, flagSeed int64) int64 {
	s := flagSeed
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}

// Main is for TestMain: when the environment variable env is set, the binary
// runs child instead of the tests and exits 0 on success, 1 on error.
func Main(m *testing.M, env string, child func(value string) error) {
	if v := os.Getenv(env); v != "" {
		if err := child(v); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Child is the test binary running as the process under test.
type Child struct {
	t testing.TB
	p *proc.Process
}

// Start runs the test binary with no test selected and env added to the
// environment (one of them names the Main variable); its stderr is the
// test's. The child is killed when the test ends, if it has not ended.
func Start(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	p, err := proc.Start(cmd)
	if err != nil {
		t.Fatalf("start child: %v", err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return &Child{t: t, p: p}
}

// KillAfter kills the child with SIGKILL after d. It reports false, without
// killing, when the child ended first (err is then its exit).
func (c *Child) KillAfter(d time.Duration) (killed bool, err error) {
	killed, err = c.p.KillAfter(d)
	if killed && err != nil {
		c.t.Fatalf("kill child: %v", err)
	}
	return killed, err
}

// Wait waits up to timeout for the child to end and returns its exit error;
// after the timeout it kills the child and reports that.
func (c *Child) Wait(timeout time.Duration) error {
	exit, ended := c.p.WaitFor(timeout)
	if !ended {
		return fmt.Errorf("child still running after %s: killed", timeout)
	}
	return exit
}

// Exited reports, without waiting, whether the child ended, and its exit.
func (c *Child) Exited() (bool, error) { return c.p.Ended() }
