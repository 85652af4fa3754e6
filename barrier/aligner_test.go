package barrier

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestAligner runs the scripts in testdata/. Commands:
//
//	new inputs=<n> mode=<exactly_once|at_least_once>
//	barrier input=<i> id=<n> [final] [initial]
//	cancel input=<i> id=<n>
//	end input=<i>
//	timeout id=<n>     the task's alignment timer for checkpoint n expired
//	aborted id=<n>     the coordinator's notice: checkpoint n was aborted
//	state
//
// Each event prints the actions the aligner returns, one per line, or
// "(no actions)"; a panic prints "panic: <message>". Rewrite the expected
// output with `go test ./barrier -run TestAligner -rewrite`, then review the
// diff line by line.
func TestAligner(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var a *Aligner
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && a == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			switch d.Cmd {
			case "new":
				var n int
				var mode string
				d.ScanArgs(t, "inputs", &n)
				d.ScanArgs(t, "mode", &mode)
				m := parseMode(t, d, mode)
				a = nil
				return catch(func() string { a = NewAligner(n, m); return "" })
			case "barrier":
				b := Barrier{ID: scanID(t, d), Final: d.HasArg("final"), Initial: d.HasArg("initial")}
				return catch(func() string { return formatActions(a.OnBarrier(scanInput(t, d), b)) })
			case "cancel":
				id := scanID(t, d)
				return catch(func() string { return formatActions(a.OnCancel(scanInput(t, d), id)) })
			case "end":
				return catch(func() string { return formatActions(a.OnEndOfInput(scanInput(t, d))) })
			case "aborted":
				id := scanID(t, d)
				return catch(func() string { return formatActions(a.OnAborted(id)) })
			case "timeout":
				id := scanID(t, d)
				return catch(func() string { return formatActions(a.OnAlignmentTimeout(id)) })
			case "state":
				return formatState(a)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func parseMode(t *testing.T, d *datadriven.TestData, s string) Mode {
	for _, m := range []Mode{ExactlyOnce, AtLeastOnce} {
		if m.String() == s {
			return m
		}
	}
	d.Fatalf(t, "unknown mode %q", s)
	return 0
}

func scanInput(t *testing.T, d *datadriven.TestData) int {
	var i int
	d.ScanArgs(t, "input", &i)
	return i
}

func scanID(t *testing.T, d *datadriven.TestData) CheckpointID {
	var id uint64
	d.ScanArgs(t, "id", &id)
	return CheckpointID(id)
}

// catch returns f's output, or the panic f raised.
func catch(f func() string) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("panic: %v\n", r)
		}
	}()
	return f()
}

func formatActions(acts []Action) string {
	if len(acts) == 0 {
		return "(no actions)\n"
	}
	var sb strings.Builder
	for _, act := range acts {
		sb.WriteString(act.String())
		if act.Kind == Snapshot && act.Barrier.Final {
			sb.WriteString(" final")
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func formatState(a *Aligner) string {
	var blocked, ended []int
	for i := range a.Inputs() {
		if a.Blocked(i) {
			blocked = append(blocked, i)
		}
		if a.Ended(i) {
			ended = append(ended, i)
		}
	}
	pending := "none"
	if id, ok := a.Pending(); ok {
		pending = fmt.Sprint(uint64(id))
	}
	return fmt.Sprintf("pending %s\nblocked %s\nended %s\n", pending, formatInputs(blocked), formatInputs(ended))
}

func formatInputs(ins []int) string {
	if len(ins) == 0 {
		return "none"
	}
	return strings.Trim(fmt.Sprint(ins), "[]")
}
