package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// TestCoordMachine runs the scripts in testdata/coordinator. Commands:
//
//	new tasks=<n> sources=<n> [next=<id>] [initial] [interval=<d>] [min-pause=<d>] [timeout=<d>]
//	start [gated] [eager]          the attempt begins (gated: its sources have cut gates; eager: one is eager)
//	at-cut                         every cut gate opened
//	tick                           a timer fired
//	ack task=<i> id=<n> [bytes=<b>] task i (operator t<i>, one subtask) acks
//	decline id=<n> err=<word> [cause=<abort cause>]
//	trigger-failed id=<n> err=<word>
//	persisted id=<n> [err=<word>]
//	finished                       a source ended
//	stop
//	end                            the attempt ended
//	state
//
// Every event takes at=<duration>, the script's clock (from 0, kept until
// changed; it must not go back). Each event prints the actions the machine
// returns, one per line, or "(no actions)". Rewrite the expected output with
// `go test ./runtime -run TestCoordMachine -rewrite`, then review the diff
// line by line.
func TestCoordMachine(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	datadriven.Walk(t, "testdata/coordinator", func(t *testing.T, path string) {
		var m *coordMachine
		var now time.Time
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && m == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			if d.HasArg("at") {
				var s string
				d.ScanArgs(t, "at", &s)
				at := base.Add(scanDuration(t, d, s))
				if at.Before(now) {
					d.Fatalf(t, "at=%s goes back in time", s)
				}
				now = at
			}
			ev := coordEvent{now: now}
			switch d.Cmd {
			case "new":
				cfg := coordConfig{job: "script", maxParallelism: 128, initial: d.HasArg("initial"),
					checkpoint: CheckpointOptions{Timeout: 10 * time.Minute}}
				d.ScanArgs(t, "tasks", &cfg.tasks)
				d.ScanArgs(t, "sources", &cfg.sources)
				if d.HasArg("next") {
					cfg.next = scanCheckpointID(t, d, "next")
				}
				for key, dst := range map[string]*time.Duration{"interval": &cfg.checkpoint.Interval,
					"min-pause": &cfg.checkpoint.MinPause, "timeout": &cfg.checkpoint.Timeout} {
					if d.HasArg(key) {
						var s string
						d.ScanArgs(t, key, &s)
						*dst = scanDuration(t, d, s)
					}
				}
				m, now = newCoordMachine(cfg), base
				return ""
			case "state":
				return formatCoordState(m, base)
			case "start":
				ev.kind, ev.gated, ev.eager = coordStart, d.HasArg("gated"), d.HasArg("eager")
			case "at-cut":
				ev.kind = coordAtCut
			case "tick":
				ev.kind = coordTick
			case "ack":
				ev.kind, ev.id = coordAck, scanCheckpointID(t, d, "id")
				d.ScanArgs(t, "task", &ev.task)
				var bytes int64
				if d.HasArg("bytes") {
					d.ScanArgs(t, "bytes", &bytes)
				}
				ev.ops = []ackedOp{{uid: fmt.Sprintf("t%d", ev.task), parallelism: 1,
					snap: state.SubtaskSnapshot{Files: []state.File{{Path: "f", Size: bytes}}}}}
			case "decline":
				ev.kind, ev.id, ev.err = coordDecline, scanCheckpointID(t, d, "id"), scanErr(t, d)
				if d.HasArg("cause") {
					var c string
					d.ScanArgs(t, "cause", &c)
					ev.cause = abortCause(c)
				}
			case "trigger-failed":
				ev.kind, ev.id, ev.err = coordTriggerFailed, scanCheckpointID(t, d, "id"), scanErr(t, d)
			case "persisted":
				ev.kind, ev.id, ev.err = coordPersisted, scanCheckpointID(t, d, "id"), scanErr(t, d)
			case "finished":
				ev.kind = coordSourceFinished
			case "stop":
				ev.kind = coordStop
			case "end":
				ev.kind = coordEnd
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return formatCoordActions(m.step(ev))
		})
	})
}

func scanDuration(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return v
}

func scanCheckpointID(t *testing.T, d *datadriven.TestData, key string) barrier.CheckpointID {
	var id uint64
	d.ScanArgs(t, key, &id)
	return barrier.CheckpointID(id)
}

// scanErr returns the error named by err=<word>, nil without one.
func scanErr(t *testing.T, d *datadriven.TestData) error {
	if !d.HasArg("err") {
		return nil
	}
	var s string
	d.ScanArgs(t, "err", &s)
	return errors.New(s)
}

func formatCoordActions(acts []coordAction) string {
	if len(acts) == 0 {
		return "(no actions)\n"
	}
	var sb strings.Builder
	for _, a := range acts {
		sb.WriteString(a.String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

func formatCoordState(m *coordMachine, base time.Time) string {
	var sb strings.Builder
	if p := m.pending; p != nil {
		fmt.Fprintf(&sb, "pending %d acked %d/%d deadline %s\n", p.barrier.ID, len(p.acked), m.cfg.tasks, p.deadline.Sub(base))
	} else {
		sb.WriteString("pending none\n")
	}
	if at, ok := m.nextPeriodic(); ok {
		fmt.Fprintf(&sb, "next periodic %s\n", max(at.Sub(base), 0))
	} else {
		sb.WriteString("next periodic none\n")
	}
	fmt.Fprintf(&sb, "next id %d, sources active %d, final wanted %v, final started %v\n", m.nextID, m.active, m.finalWanted, m.finalStarted)
	if m.gated {
		fmt.Fprintf(&sb, "gated, at a cut %v\n", m.atCut)
	}
	return sb.String()
}
