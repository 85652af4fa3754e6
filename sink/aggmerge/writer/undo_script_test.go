package writer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// TestUndoScripts runs the scripts in testdata/undo. Commands:
//
//	table buckets=<n> cols=<name>:<func>[:int|string],... [delete=ignore|reject|allow]
//	write writer=<job>/<sink>#<i> cols=<c>,... key=<k> [vals=<v>,...] [mode=aggregate|retract|overwrite] [delete] [epoch=<e>]
//	baseline sink=<job>/<sink> [parallelism=<p>]
//	undo sink=<job>/<sink> [checkpoint=<n>] [crash-after=<keys>]
//	open sink=<job>/<sink> [parallelism=<p>]
//	restore sink=<job>/<sink> [parallelism=<p>] [checkpoint=<n>] [claim=<bucket>@<offset>] [as-sink=<job>/<sink>] [foreign]
//	corrupt sink=<job>/<sink> checkpoint=<n> bucket=<b> offset=<o>|missing
//	truncate bucket=<b> [below=<offset>]
//	recreate
//	rows
//	log bucket=<b> [from=<offset>]
//	snapshot name=<s>
//	compare name=<s>
//	reopen
//
// The table has one string key column k. A write prints the log entries it
// appended. baseline records, as a checkpoint of the sink would, the log end
// of every bucket and prints it as checkpoint 1, 2, ... of that sink. undo
// does for every bucket what recover does: plan from the sink's baseline of
// the checkpoint (the latest by default) to the current end, apply as
// writer <job>/<sink>#0; crash-after applies only the first keys of the plans, as a
// crash in the middle of undo would leave the table, and stops. The sink's
// columns are those of its first write. open opens the real sink's
// subtasks 0..p-1 (default 1) fresh, as a first run does: they register.
// restore opens the real sink's
// subtasks 0..p-1 (default 1) on the checkpoint's state, as the runtime
// does on restore: one union item per subtask of the parallelism the
// baseline was taken at (claim adds an item of one more subtask claiming a
// bucket; as-sink and foreign make the items another sink's or another
// table's); it prints each subtask's logged progress or its error, with the
// table's directory and ids replaced by <table>, <id> and <old-id>. A write
// takes the epoch the writer last registered, unless given. corrupt edits
// a recorded baseline; truncate drops a bucket's log below an offset (its
// end by default); recreate replaces the table by a new one of the same
// schema in the same directory. Values: integers or strings per column
// type, null for a written null. Rewrite the expected output with
// `go test ./sink/aggmerge/writer -run TestUndoScripts -rewrite`, then
// review the diff line by line.
func TestUndoScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/undo", func(t *testing.T, path string) {
		s := &script{t: t}
		defer s.close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "table" && s.tbl == nil {
				d.Fatalf(t, "%s before table", d.Cmd)
			}
			switch d.Cmd {
			case "table":
				return s.table(d)
			case "write":
				return s.write(d)
			case "baseline":
				return s.baseline(d)
			case "undo":
				return s.undo(d)
			case "rows":
				return s.rows()
			case "log":
				return s.log(d)
			case "snapshot":
				s.snaps[arg(t, d, "name")] = s.rows()
				return ""
			case "compare":
				return s.compare(d)
			case "reopen":
				s.reopen()
				return ""
			case "open":
				return s.openSinks(d, nil, 0)
			case "restore":
				return s.restore(d)
			case "corrupt":
				s.corrupt(d)
				return ""
			case "truncate":
				b := intArg(t, d, "bucket", 0)
				_, end, err := s.tbl.LogOffsets(b)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				if err := s.tbl.Truncate(b, uint64(intArg(t, d, "below", int(end)))); err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				start, _, _ := s.tbl.LogOffsets(b)
				return fmt.Sprintf("bucket %d: log starts at %d\n", b, start)
			case "recreate":
				s.recreate()
				return ""
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

type script struct {
	t      *testing.T
	dir    string
	schema aggmerge.Schema
	tbl    *aggmerge.Table
	oldIDs []string                       // ids of tables recreate replaced
	cols   map[string][]string            // sink (<job>/<sink>) -> its columns
	ckpts  map[string][]*scriptCheckpoint // sink -> checkpoints 1, 2, ...
	snaps  map[string]string
}

// scriptCheckpoint is what the sink's checkpoint saved, whole.
type scriptCheckpoint struct {
	base    map[int]uint64
	par     int // parallelism the baselines were taken at
	tableID string
}

func (s *script) close() {
	if s.tbl != nil {
		_ = s.tbl.Close()
	}
}

func arg(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	v, err := strconv.Atoi(arg(t, d, key))
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return v
}

func (s *script) table(d *datadriven.TestData) string {
	t := s.t
	s.close()
	sch := aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: agg.Type{Kind: agg.KindString}}},
		Buckets: intArg(t, d, "buckets", 1),
		Delete:  aggmerge.DeleteIgnore,
	}
	if d.HasArg("delete") {
		sch.Delete = aggmerge.DeleteBehavior(arg(t, d, "delete"))
	}
	for _, c := range strings.Split(arg(t, d, "cols"), ",") {
		parts := strings.Split(c, ":")
		if len(parts) < 2 {
			d.Fatalf(t, "column %q: want name:func[:type]", c)
		}
		typ := agg.Type{Kind: agg.KindInt64}
		if parts[1] == "listagg" || len(parts) == 3 && parts[2] == "string" {
			typ = agg.Type{Kind: agg.KindString}
		}
		sch.Values = append(sch.Values, aggmerge.Column{Name: parts[0], Type: typ, Func: parts[1]})
	}
	s.dir, s.schema, s.oldIDs = t.TempDir(), sch, nil
	var err error
	if s.tbl, err = aggmerge.Open(s.dir, sch, aggmerge.Options{}); err != nil {
		d.Fatalf(t, "open: %v", err)
	}
	s.cols, s.ckpts, s.snaps = map[string][]string{}, map[string][]*scriptCheckpoint{}, map[string]string{}
	return ""
}

func (s *script) reopen() {
	if err := s.tbl.Close(); err != nil {
		s.t.Fatal(err)
	}
	var err error
	if s.tbl, err = aggmerge.Open(s.dir, aggmerge.Schema{}, aggmerge.Options{}); err != nil {
		s.t.Fatal(err)
	}
}

// sinkOf returns the sink of a writer id: its group <job>/<sink>.
func sinkOf(t *testing.T, d *datadriven.TestData, writer string) string {
	id, err := base.ParseWriterID(writer)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return id.Group()
}

// sinkArg returns the sink a command names (sink=<job>/<sink>) and the
// identity of its subtask 0.
func sinkArg(t *testing.T, d *datadriven.TestData) (string, base.WriterID) {
	group := arg(t, d, "sink")
	id, err := base.ParseWriterID(group + "#0")
	if err != nil || id.Group() != group {
		d.Fatalf(t, "sink %q: want <job>/<sink>", group)
	}
	return group, id
}

func (s *script) write(d *datadriven.TestData) string {
	t, tbl := s.t, s.tbl
	w := aggmerge.Writer{ID: arg(t, d, "writer"), Epoch: 1}
	for _, r := range tbl.Writers() {
		if r.Writer == w.ID {
			w.Epoch = r.Epoch
		}
	}
	w.Epoch = uint64(intArg(t, d, "epoch", int(w.Epoch)))
	cols := strings.Split(arg(t, d, "cols"), ",")
	sink := sinkOf(t, d, w.ID)
	if prev, ok := s.cols[sink]; !ok {
		s.cols[sink] = cols
	} else if !slices.Equal(prev, cols) {
		d.Fatalf(t, "sink %s wrote columns %v before, now %v", sink, prev, cols)
	}
	mode := aggmerge.Aggregate
	if d.HasArg("mode") {
		switch m := arg(t, d, "mode"); m {
		case "aggregate":
		case "retract":
			mode = aggmerge.Retract
		case "overwrite":
			mode = aggmerge.Overwrite
		default:
			d.Fatalf(t, "unknown mode %q", m)
		}
	}
	key := []agg.Value{agg.StringValue(arg(t, d, "key"))}
	var vals []agg.Value
	if d.HasArg("vals") {
		vals = s.parseVals(d, cols, strings.Split(arg(t, d, "vals"), ","))
	}
	b, err := tbl.NewBatch(w, cols)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	if d.HasArg("delete") {
		err = b.Delete(mode, key, vals)
	} else {
		err = b.Upsert(mode, key, vals)
	}
	if err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	before := tbl.LogEnds()
	if _, err := tbl.Apply(b); err != nil {
		return fmt.Sprintf("error: %s\n", s.anonymize(err.Error()))
	}
	var out strings.Builder
	for bk, from := range before {
		s.readLog(bk, from, func(e *aggmerge.Entry) { fmt.Fprintf(&out, "b%d %s\n", bk, s.entry(e)) })
	}
	if out.Len() == 0 {
		return "(unchanged)\n"
	}
	return out.String()
}

func (s *script) parseVals(d *datadriven.TestData, cols, raw []string) []agg.Value {
	t := s.t
	if len(raw) != len(cols) {
		d.Fatalf(t, "%d values for %d columns", len(raw), len(cols))
	}
	sch := s.tbl.Schema()
	vals := make([]agg.Value, len(raw))
	for i, r := range raw {
		c := sch.ValueIndex(cols[i])
		switch {
		case c < 0:
			d.Fatalf(t, "no column %q", cols[i])
		case r == "null":
			vals[i] = agg.NullValue()
		case sch.Values[c].Type.Kind == agg.KindString:
			vals[i] = agg.StringValue(r)
		default:
			n, err := strconv.ParseInt(r, 10, 64)
			if err != nil {
				d.Fatalf(t, "column %s: %v", cols[i], err)
			}
			vals[i] = agg.IntValue(n)
		}
	}
	return vals
}

func (s *script) baseline(d *datadriven.TestData) string {
	sink := arg(s.t, d, "sink")
	c := &scriptCheckpoint{base: map[int]uint64{}, par: intArg(s.t, d, "parallelism", 1), tableID: s.tbl.ID().String()}
	for b, e := range s.tbl.LogEnds() {
		c.base[b] = e
	}
	s.ckpts[sink] = append(s.ckpts[sink], c)
	return fmt.Sprintf("checkpoint %d: %s\n", len(s.ckpts[sink]), formatBase(c.base))
}

func formatBase(base map[int]uint64) string {
	var parts []string
	for _, b := range slices.Sorted(maps.Keys(base)) {
		parts = append(parts, fmt.Sprintf("b%d@%d", b, base[b]))
	}
	return strings.Join(parts, " ")
}

// checkpoint returns checkpoint n of the sink (the latest when n is 0).
func (s *script) checkpoint(d *datadriven.TestData, sink string) (int, *scriptCheckpoint) {
	ckpts := s.ckpts[sink]
	n := intArg(s.t, d, "checkpoint", len(ckpts))
	if n < 1 || n > len(ckpts) {
		d.Fatalf(s.t, "sink %s has no checkpoint %d", sink, n)
	}
	return n, ckpts[n-1]
}

func (s *script) undo(d *datadriven.TestData) string {
	t, tbl := s.t, s.tbl
	sink, id := sinkArg(t, d)
	n, c := s.checkpoint(d, sink)
	names := s.cols[sink]
	var cols []int
	for _, c := range names {
		cols = append(cols, tbl.Schema().ValueIndex(c))
	}
	crashAfter := intArg(t, d, "crash-after", -1)
	w := aggmerge.Writer{ID: id.String(), Epoch: 1}
	var out strings.Builder
	for b := range tbl.Schema().Buckets {
		from := c.base[b]
		_, end, err := tbl.LogOffsets(b)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		if from == end {
			fmt.Fprintf(&out, "bucket %d: nothing to undo at %d\n", b, end)
			continue
		}
		p, err := planUndo(tbl, b, from, end, sink, cols)
		if err != nil {
			return out.String() + fmt.Sprintf("error: %v\n", err)
		}
		fmt.Fprintf(&out, "bucket %d: undo [%d, %d): %d entries scanned, %d keys\n", b, p.from, p.to, p.scanned, len(p.keys))
		if crashAfter >= 0 && crashAfter < len(p.keys) {
			s.applyPart(d, w, names, p, crashAfter)
			fmt.Fprintf(&out, "crash after %d of its keys\n", crashAfter)
			return out.String()
		}
		crashAfter -= len(p.keys)
		if err := applyUndo(tbl, w, names, p, uint64(n)); err != nil {
			return out.String() + fmt.Sprintf("error: %v\n", err)
		}
	}
	return out.String()
}

// applyPart writes the first n keys of p as applyUndo would, without the
// rollback marker: what a crash between two undo batches leaves.
func (s *script) applyPart(d *datadriven.TestData, w aggmerge.Writer, cols []string, p undoPlan, n int) {
	t := s.t
	b, err := s.tbl.NewBatch(w, cols)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	b.SetUndo(true)
	for i := range n {
		if err := b.Upsert(aggmerge.Overwrite, p.keys[i], p.vals[i]); err != nil {
			d.Fatalf(t, "%v", err)
		}
	}
	if _, err := s.tbl.Apply(b); err != nil {
		d.Fatalf(t, "%v", err)
	}
}

func (s *script) rows() string {
	var out strings.Builder
	err := s.tbl.Scan(func(r aggmerge.Row) error {
		k, err := s.tbl.EncodeKey(r.Key)
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "b%d %s %s\n", aggmerge.BucketOf(k, s.tbl.Schema().Buckets), r.Key[0].Str(), s.image(r.Values))
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if out.Len() == 0 {
		return "(empty)\n"
	}
	return out.String()
}

func (s *script) compare(d *datadriven.TestData) string {
	name := arg(s.t, d, "name")
	want, ok := s.snaps[name]
	if !ok {
		d.Fatalf(s.t, "no snapshot %q", name)
	}
	if got := s.rows(); got != want {
		return fmt.Sprintf("differs from %s:\n%s", name, got)
	}
	return fmt.Sprintf("same as %s\n", name)
}

func (s *script) log(d *datadriven.TestData) string {
	b := intArg(s.t, d, "bucket", 0)
	var out strings.Builder
	s.readLog(b, uint64(intArg(s.t, d, "from", 0)), func(e *aggmerge.Entry) { out.WriteString(s.entry(e) + "\n") })
	if out.Len() == 0 {
		return "(empty)\n"
	}
	return out.String()
}

func (s *script) readLog(b int, from uint64, fn func(*aggmerge.Entry)) {
	err := s.tbl.ReadLog(b, from, func(e *aggmerge.Entry) error {
		fn(e)
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// entry prints "@offset op key image writer [undo]": -U and -D show
// the before-image, +I and +U the after-image.
func (s *script) entry(e *aggmerge.Entry) string {
	flag := ""
	if e.Undo {
		flag = " undo"
	}
	if e.Op == aggmerge.MarkerEntry {
		kind := "commit"
		if e.Marker.Kind == aggmerge.MarkerRollback {
			kind = "rollback"
		}
		return fmt.Sprintf("@%d %s ckpt=%d [%d, %d) %s%s", e.Offset, kind, e.Marker.Checkpoint, e.Marker.From, e.Marker.To, e.Writer.ID, flag)
	}
	img := e.After
	if e.Op == aggmerge.UpdateBefore || e.Op == aggmerge.Delete {
		img = e.Before
	}
	return fmt.Sprintf("@%d %s %s %s %s%s", e.Offset, e.Op, e.Key[0].Str(), s.image(img), e.Writer.ID, flag)
}

// image prints the columns of a row image that hold something (absent
// columns are left out): {total=5 name="x" top=null}.
func (s *script) image(vals []agg.Value) string {
	var parts []string
	for i, v := range vals {
		if v.State() != agg.Absent {
			parts = append(parts, s.tbl.Schema().Values[i].Name+"="+v.String())
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (s *script) restore(d *datadriven.TestData) string {
	t, tbl := s.t, s.tbl
	name, _ := sinkArg(t, d)
	n, c := s.checkpoint(d, name)
	items := make([]snapshotState, c.par)
	for i := range items {
		items[i] = snapshotState{Version: stateVersion, Table: s.dir, TableID: c.tableID, Sink: name,
			Subtask: i, Parallelism: c.par, Buckets: tbl.Schema().Buckets, Baselines: map[int]uint64{}}
	}
	for b, off := range c.base {
		items[Owner(b, c.par)].Baselines[b] = off
	}
	if d.HasArg("claim") {
		var b int
		var off uint64
		if _, err := fmt.Sscanf(arg(t, d, "claim"), "%d@%d", &b, &off); err != nil {
			d.Fatalf(t, "claim: %v", err)
		}
		extra := items[0]
		extra.Subtask, extra.Baselines = c.par, map[int]uint64{b: off}
		items = append(items, extra)
	}
	var raw [][]byte
	for _, it := range items {
		if d.HasArg("as-sink") {
			it.Sink = arg(t, d, "as-sink")
		}
		if d.HasArg("foreign") {
			it.Table, it.TableID = "other-table", "00000000-0000-0000-0000-00000000beef"
		}
		r, err := it.encode()
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		raw = append(raw, r)
	}
	return s.openSinks(d, raw, barrier.CheckpointID(n))
}

// openSinks opens the subtasks of the sink, restoring items of checkpoint
// n unless items is nil, and prints what each did.
func (s *script) openSinks(d *datadriven.TestData, items [][]byte, n barrier.CheckpointID) string {
	t := s.t
	sink, id := sinkArg(t, d)
	par := intArg(t, d, "parallelism", 1)
	progress := NewProgressLog()
	var out strings.Builder
	for i := range par {
		cfg := Config{Table: s.tbl, Columns: s.cols[sink]}
		cfg.setDefaults()
		sk := newSink(cfg)
		ctx := &runtime.Context{Job: id.Job, Operator: id.Sink, Subtask: i, Parallelism: par, Logger: slog.New(progress)}
		if items != nil {
			ctx.Restored, ctx.RestoredOK = n, true
			ctx.State = state.OperatorState{Unions: map[string][][]byte{stateList: items}}
		}
		fmt.Fprintf(&out, "subtask %d of %d: ", i, par)
		if err := sk.Open(ctx); err != nil {
			if !errors.Is(err, runtime.ErrRestore) {
				d.Fatalf(t, "the error does not wrap runtime.ErrRestore: %v", err)
			}
			out.WriteString("error: " + s.anonymize(err.Error()) + "\n")
			continue
		}
		fmt.Fprintf(&out, "buckets %v, epoch %d", sk.owned, sk.w.Epoch)
		for _, p := range progress.Take() {
			fmt.Fprintf(&out, ", %d entries scanned, %d keys restored", p.Scanned, p.Restored)
		}
		out.WriteString("\n")
	}
	return out.String()
}

// anonymize replaces the table's directory and ids in a message.
func (s *script) anonymize(msg string) string {
	msg = strings.ReplaceAll(msg, s.dir, "<table>")
	msg = strings.ReplaceAll(msg, s.tbl.ID().String(), "<id>")
	for _, id := range s.oldIDs {
		msg = strings.ReplaceAll(msg, id, "<old-id>")
	}
	return msg
}

func (s *script) corrupt(d *datadriven.TestData) {
	t := s.t
	_, c := s.checkpoint(d, arg(t, d, "sink"))
	b := intArg(t, d, "bucket", 0)
	if arg(t, d, "offset") == "missing" {
		delete(c.base, b)
		return
	}
	c.base[b] = uint64(intArg(t, d, "offset", 0))
}

func (s *script) recreate() {
	t := s.t
	s.oldIDs = append(s.oldIDs, s.tbl.ID().String())
	if err := s.tbl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.tbl, err = aggmerge.Open(s.dir, s.schema, aggmerge.Options{}); err != nil {
		t.Fatal(err)
	}
}
