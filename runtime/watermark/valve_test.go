package watermark

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestValve runs the scripts in testdata/. Commands:
//
//	new channels=<n> [floor=<w>]
//	wm ch=<i> at=<w>
//	idle ch=<i>
//	active ch=<i>
//	state
//
// Watermarks are plain integers (or min, max). Each event prints what the
// output did: "advance <w>", "idle", "active", or "(no change)". Rewrite the
// expected output with `go test ./runtime/watermark -run TestValve -rewrite`, then
// review the diff line by line.
func TestValve(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var v *Valve
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && v == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			ch := func() int {
				var i int
				d.ScanArgs(t, "ch", &i)
				return i
			}
			switch d.Cmd {
			case "new":
				var n int
				d.ScanArgs(t, "channels", &n)
				floor := Min
				if d.HasArg("floor") {
					floor = scanW(t, d, "floor")
				}
				v = NewValve(n, floor)
				return ""
			case "wm":
				return formatChange(v.Watermark(ch(), scanW(t, d, "at")))
			case "idle":
				return formatChange(v.Idle(ch()))
			case "active":
				return formatChange(v.Active(ch()))
			case "state":
				return formatValve(v)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func scanW(t *testing.T, d *datadriven.TestData, key string) int64 {
	var s string
	d.ScanArgs(t, key, &s)
	switch s {
	case "min":
		return Min
	case "max":
		return Max
	}
	w, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return w
}

func fmtW(w int64) string {
	switch w {
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return strconv.FormatInt(w, 10)
}

func formatChange(c Change) string {
	var sb strings.Builder
	if c.Advanced {
		fmt.Fprintf(&sb, "advance %s\n", fmtW(c.Watermark))
	}
	if c.Idle {
		sb.WriteString("idle\n")
	}
	if c.Active {
		sb.WriteString("active\n")
	}
	if sb.Len() == 0 {
		return "(no change)\n"
	}
	return sb.String()
}

func formatValve(v *Valve) string {
	out, idle, chans := v.State()
	var sb strings.Builder
	status := "active"
	if idle {
		status = "idle"
	}
	fmt.Fprintf(&sb, "output %s %s\n", fmtW(out), status)
	for i, c := range chans {
		flags := "active"
		if c.Idle {
			flags = "idle"
		}
		if !c.Aligned {
			flags += " unaligned"
		}
		fmt.Fprintf(&sb, "ch %d: %s %s\n", i, fmtW(c.Watermark), flags)
	}
	return sb.String()
}
