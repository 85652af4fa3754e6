package proc

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestProcess kills a process that runs on, and lets one that ends by
// itself go: KillAfter says which happened, and Ended and Err report the
// exit.
func TestProcess(t *testing.T) {
	p, err := Start(exec.Command("sleep", "30"))
	if err != nil {
		t.Fatal(err)
	}
	if ended, _ := p.Ended(); ended {
		t.Fatal("sleep 30 ended at once")
	}
	if killed, err := p.KillAfter(10 * time.Millisecond); !killed || err != nil {
		t.Fatalf("KillAfter of sleep 30: killed %v, %v", killed, err)
	}
	if ended, err := p.Ended(); !ended || err == nil {
		t.Fatalf("after the kill: ended %v, exit %v (want the signal)", ended, err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("a second kill: %v", err)
	}

	q, err := Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	killed, err := q.KillAfter(time.Minute)
	var ee *exec.ExitError
	if killed || err == nil || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("KillAfter of exit 3: killed %v, %v", killed, err)
	}
	if exit, ended := q.WaitFor(time.Second); !ended || exit != err {
		t.Fatalf("WaitFor after the end: %v, %v", exit, ended)
	}
}
