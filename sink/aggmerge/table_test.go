package aggmerge

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

func smallSchema() Schema {
	return Schema{
		Key:     []Column{{Name: "id", Type: agg.String}},
		Values:  []Column{{Name: "n", Type: agg.Int64, Func: "sum"}, {Name: "note", Type: agg.String}},
		Buckets: 2,
		Delete:  DeleteAllow,
	}
}

func key(s string) []agg.Value { return []agg.Value{agg.StringValue(s)} }

func mustApply(t *testing.T, tbl *Table, b *Batch) Result {
	t.Helper()
	res, err := tbl.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	return res
}

func TestSchemaStoredAndChecked(t *testing.T) {
	dir := t.TempDir()
	tbl, err := Open(dir, smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := tbl.ID()
	if got := tbl.Schema().Values[1].Func; got != DefaultFunc {
		t.Errorf("default function %q", got)
	}
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	// The stored schema opens the table without one, with the same identity.
	tbl, err = Open(dir, Schema{}, Options{})
	if err != nil || tbl.ID() != id {
		t.Fatalf("reopen: id %v vs %v, %v", tbl.ID(), id, err)
	}
	_ = tbl.Close()

	s := smallSchema()
	s.Buckets = 3
	s.Values[0].Func = "max"
	s.Values[1].Type = agg.Bytes
	s.Values[1].Func = "rbm32"
	_, err = Open(dir, s, Options{})
	if !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("mismatch not detected: %v", err)
	}
	for _, want := range []string{"buckets: stored 2, given 3", `column "n": function stored sum, given max`, `column "note": type stored string, given bytes`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("mismatch error %q lacks %q", err, want)
		}
	}
	// Aliases and defaults compare by their canonical form.
	s = smallSchema()
	s.Values[1].Func = "LAST_VALUE_IGNORE_NULLS"
	tbl, err = Open(dir, s, Options{})
	if err != nil {
		t.Fatalf("alias of the stored function refused: %v", err)
	}
	_ = tbl.Close()

	if _, err := Open(t.TempDir()+"/none", Schema{}, Options{}); !errors.Is(err, ErrNoTable) {
		t.Errorf("open of an empty dir without schema: %v", err)
	}
	other, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.ID() == id {
		t.Error("two tables share an identity")
	}
}

func TestSchemaValidation(t *testing.T) {
	bad := map[string]func(*Schema){
		"does not accept string": func(s *Schema) { s.Values[0].Func = "sum"; s.Values[0].Type = agg.String },
		"buckets 0":              func(s *Schema) { s.Buckets = 0 },
		"appears twice":          func(s *Schema) { s.Values[1].Name = "id" },
		"delete behaviour":       func(s *Schema) { s.Delete = "sometimes" },
		"has a function":         func(s *Schema) { s.Key[0].Func = "max" },
		"cannot be a key":        func(s *Schema) { s.Key[0].Type = agg.StringSet },
		"unknown function":       func(s *Schema) { s.Values[0].Func = "avg" },
		"no key columns":         func(s *Schema) { s.Key = nil },
	}
	for want, mutate := range bad {
		s := smallSchema()
		mutate(&s)
		_, err := Open(t.TempDir(), s, Options{})
		if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}

func TestLogEntries(t *testing.T) {
	tbl, err := Open(t.TempDir(), Schema{
		Key: smallSchema().Key, Values: smallSchema().Values, Buckets: 1, Delete: DeleteAllow,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	w := Writer{ID: "job/sink/0", Epoch: 2}
	b, _ := tbl.NewBatch(w, []string{"n"})
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(1)})
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(2)})
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.NullValue()}) // unchanged: nothing logged
	_ = b.Delete(Aggregate, key("a"), nil)
	_ = b.Mark(0, Marker{Kind: MarkerCommit, Checkpoint: 4})
	res := mustApply(t, tbl, b)
	if res.Entries != 5 || res.Unchanged != 1 {
		t.Errorf("result %+v", res)
	}
	b.SetUndo(true)
	_ = b.Upsert(Overwrite, key("a"), []agg.Value{agg.IntValue(3)})
	mustApply(t, tbl, b)

	var got []string
	err = tbl.ReadLog(0, 0, func(e *Entry) error {
		got = append(got, e.Op.String()+" "+vals(e.Before)+">"+vals(e.After)+" "+e.Writer.ID+" "+boolStr(e.Undo))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"+I >1,<absent> job/sink/0 -",
		"-U 1,<absent>>3,<absent> job/sink/0 -",
		"+U 1,<absent>>3,<absent> job/sink/0 -",
		"-D 3,<absent>> job/sink/0 -",
		"marker > job/sink/0 -",
		"+I >3,<absent> job/sink/0 undo",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Reading from the middle of an update pair starts at its +U.
	var ops []string
	_ = tbl.ReadLog(0, 2, func(e *Entry) error { ops = append(ops, e.Op.String()); return nil })
	if strings.Join(ops, " ") != "+U -D marker +I" {
		t.Errorf("read from 2: %v", ops)
	}
	var m Marker
	_ = tbl.ReadLog(0, 4, func(e *Entry) error {
		if e.Op == MarkerEntry {
			m = e.Marker
		}
		return nil
	})
	if m != (Marker{Kind: MarkerCommit, Checkpoint: 4}) {
		t.Errorf("marker %+v", m)
	}
	if err := tbl.ReadLog(0, 7, func(*Entry) error { return nil }); !errors.Is(err, ErrBeyondLogEnd) {
		t.Errorf("read beyond end: %v", err)
	}
	if err := tbl.ReadLog(0, 6, func(*Entry) error { t.Error("entry at end"); return nil }); err != nil {
		t.Errorf("read at end: %v", err)
	}
}

// TestReadLogWith: MarkersOnly passes the markers only, at their offsets;
// Reuse reads the same entries as ReadLog without allocating their key and
// images anew for each.
func TestReadLogWith(t *testing.T) {
	tbl, err := Open(t.TempDir(), Schema{
		Key: []Column{{Name: "id", Type: agg.Int64}}, Values: []Column{{Name: "n", Type: agg.Int64, Func: "sum"}}, Buckets: 1,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	b, _ := tbl.NewBatch(Writer{ID: "job/sink#0", Epoch: 1}, nil)
	var markers []uint64
	for i := range 50 {
		for k := range 20 {
			_ = b.Upsert(Aggregate, []agg.Value{agg.IntValue(int64(k))}, []agg.Value{agg.IntValue(int64(i))})
		}
		mustApply(t, tbl, b)
		markers = append(markers, tbl.LogEnds()[0])
		_ = b.Mark(0, Marker{Kind: MarkerCommit, Checkpoint: uint64(i + 1)})
		mustApply(t, tbl, b)
	}
	read := func(o LogRead, from uint64) (got []string, allocs float64) {
		t.Helper()
		allocs = testing.AllocsPerRun(5, func() {
			got = got[:0]
			if err := tbl.ReadLogWith(0, from, o, func(e *Entry) error {
				got = append(got, strconv.FormatUint(e.Offset, 10)+" "+e.Op.String()+" "+vals(e.Key)+" "+vals(e.Before)+">"+vals(e.After))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
		return got, allocs
	}
	all, allocs := read(LogRead{}, 0)
	reused, reusedAllocs := read(LogRead{Reuse: true}, 0)
	if !slices.Equal(all, reused) {
		t.Errorf("Reuse read other entries:\n%s\nwant:\n%s", strings.Join(reused, "\n"), strings.Join(all, "\n"))
	}
	// got's strings are allocated alike; Reuse saves the key and images of
	// each of the 2,000 entries.
	if allocs-reusedAllocs < 2000 {
		t.Errorf("Reuse: %.0f allocations, without: %.0f", reusedAllocs, allocs)
	}
	var want []string
	for _, e := range all {
		if strings.Contains(e, " marker ") {
			want = append(want, e)
		}
	}
	if got, _ := read(LogRead{MarkersOnly: true}, 0); !slices.Equal(got, want) || len(got) != len(markers) {
		t.Errorf("MarkersOnly read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, off := range markers {
		if !strings.HasPrefix(want[i], strconv.FormatUint(off, 10)+" ") {
			t.Errorf("marker %d: %s, want at %d", i, want[i], off)
		}
	}
	// From the middle of the log: the markers from there.
	if got, _ := read(LogRead{MarkersOnly: true}, markers[10]+1); !slices.Equal(got, want[11:]) {
		t.Errorf("MarkersOnly from %d: %d markers, want %d", markers[10]+1, len(got), len(want[11:]))
	}
	// Decode asked for every change, at its last offset, with its encoded
	// key: the changes it declines come undecoded, their encoded key and
	// after-image decoding to what a decoding read gives.
	asked, i := 0, 0
	declined := 0
	err = tbl.ReadLogWith(0, 0, LogRead{Reuse: true, Decode: func(e *Entry) bool {
		asked++
		if k, err := tbl.EncodeKey([]agg.Value{agg.IntValue(int64(asked-1) % 20)}); err != nil || string(k) != string(e.EncodedKey) {
			t.Fatalf("asked about %x at %d, want the key %x (%v)", e.EncodedKey, e.Offset, k, err)
		}
		return asked%3 != 0
	}}, func(e *Entry) error {
		defer func() { i++ }()
		if e.Op == MarkerEntry {
			return nil
		}
		if e.Key != nil {
			if e.EncodedAfter != nil {
				t.Fatalf("%s: decoded and encoded", all[i])
			}
			return nil
		}
		declined++
		after, err := tbl.DecodeImage(e.EncodedAfter, nil)
		if err != nil {
			return err
		}
		k, _ := tbl.EncodeKey([]agg.Value{agg.IntValue(int64(asked-1) % 20)})
		got := strconv.FormatUint(e.Offset, 10) + " " + e.Op.String() + " " + vals(after)
		if want := all[i]; !strings.HasPrefix(want, strconv.FormatUint(e.Offset, 10)+" "+e.Op.String()+" ") ||
			!strings.HasSuffix(want, ">"+vals(after)) || string(k) != string(e.EncodedKey) {
			t.Fatalf("undecoded entry %s, want %s", got, want)
		}
		return nil
	})
	if err != nil || asked != 1000 || declined < 600 || i != len(all) {
		t.Fatalf("Decode read: %v; asked %d times, %d entries undecoded, %d entries of %d", err, asked, declined, i, len(all))
	}
}

func vals(v []agg.Value) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func boolStr(b bool) string {
	if b {
		return "undo"
	}
	return "-"
}

func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	s := smallSchema()
	s.Buckets = 1
	tbl, err := Open(dir, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tbl.NewBatch(Writer{ID: "w"}, []string{"n"})
	// Five batches of an insert or an update: chunks at offsets 0, 1, 3, 5, 7.
	for i := range 5 {
		_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(int64(i + 1))})
		mustApply(t, tbl, b)
	}
	offsets := func() []uint64 {
		var o []uint64
		start, _, _ := tbl.LogOffsets(0)
		if err := tbl.ReadLog(0, start, func(e *Entry) error { o = append(o, e.Offset); return nil }); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if err := tbl.Truncate(0, 4); err != nil { // 4 is the +U of the chunk at 3: keep 3
		t.Fatal(err)
	}
	if start, end, _ := tbl.LogOffsets(0); start != 3 || end != 9 {
		t.Errorf("offsets after truncate below 4: [%d, %d)", start, end)
	}
	if got := offsets(); len(got) != 6 || got[0] != 3 {
		t.Errorf("entries after truncate: %v", got)
	}
	if err := tbl.ReadLog(0, 2, func(*Entry) error { return nil }); !errors.Is(err, ErrBelowLogStart) {
		t.Errorf("read below start: %v", err)
	}
	if err := tbl.Truncate(0, 10); !errors.Is(err, ErrBeyondLogEnd) {
		t.Errorf("truncate beyond end: %v", err)
	}
	if err := tbl.Truncate(0, 1); err != nil { // below the start: nothing to do
		t.Fatal(err)
	}
	_ = tbl.Close()
	tbl, err = Open(dir, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if start, end, _ := tbl.LogOffsets(0); start != 3 || end != 9 {
		t.Errorf("offsets after reopen: [%d, %d)", start, end)
	}
	if err := tbl.Truncate(0, 9); err != nil {
		t.Fatal(err)
	}
	if got := offsets(); len(got) != 0 {
		t.Errorf("entries after truncating everything: %v", got)
	}
	if r, ok, _ := tbl.Get(key("a")); !ok || r.Values[0].Int() != 15 {
		t.Errorf("rows changed by truncation: %v %v", r, ok)
	}
}

func TestWriteErrors(t *testing.T) {
	s := smallSchema()
	s.Delete = DeleteReject
	s.Values = append(s.Values, Column{Name: "peak", Type: agg.Int64, Func: "max"})
	tbl, err := Open(t.TempDir(), s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if _, err := tbl.NewBatch(Writer{}, []string{"nope"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown column: %v", err)
	}
	b, _ := tbl.NewBatch(Writer{}, []string{"n"})
	if err := b.Upsert(Aggregate, key("a"), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("missing values: %v", err)
	}
	if err := b.Upsert(Aggregate, key("a"), []agg.Value{agg.StringValue("1")}); !errors.Is(err, agg.ErrType) {
		t.Errorf("string into int64: %v", err)
	}
	if err := b.Upsert(Aggregate, []agg.Value{agg.NullValue()}, []agg.Value{agg.IntValue(1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("null key: %v", err)
	}
	// A failing write fails the whole batch: the upsert before it is not applied.
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(1)})
	_ = b.Delete(Aggregate, key("a"), nil)
	if _, err := tbl.Apply(b); !errors.Is(err, ErrDeleteRejected) {
		t.Errorf("rejected delete: %v", err)
	}
	b.Reset()
	if _, ok, _ := tbl.Get(key("a")); ok || tbl.LogEnds()[0]+tbl.LogEnds()[1] != 0 {
		t.Error("a failed batch left a row or log entries")
	}
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(math.MaxInt64)})
	mustApply(t, tbl, b)
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(1)})
	_, err = tbl.Apply(b)
	if !errors.Is(err, agg.ErrOverflow) || !strings.Contains(err.Error(), `column "n"`) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("overflow: %v", err)
	}
	b.Reset()
	if r, _, _ := tbl.Get(key("a")); r.Values[0].Int() != math.MaxInt64 {
		t.Errorf("overflowed sum stored: %v", r.Values[0])
	}

	all, _ := tbl.NewBatch(Writer{}, nil)
	err = all.Upsert(Retract, key("a"), []agg.Value{agg.IntValue(1), agg.NullValue(), agg.IntValue(1)})
	if !errors.Is(err, agg.ErrCannotRetract) || !strings.Contains(err.Error(), `"peak"`) {
		t.Errorf("retract of a max column: %v", err)
	}
	part, _ := tbl.NewBatch(Writer{}, []string{"n", "note"})
	if err := part.Upsert(Retract, key("a"), []agg.Value{agg.IntValue(1), agg.NullValue()}); err != nil {
		t.Errorf("retract of sum and last_non_null_value: %v", err)
	}
	if err := part.Delete(Overwrite, key("a"), []agg.Value{agg.IntValue(1), agg.NullValue()}); !errors.Is(err, ErrInvalid) {
		t.Errorf("overwrite delete with values: %v", err)
	}
}

// TestKeyEncodingPinned pins the documented key bytes and bucket function,
// which other tools rely on (docs/TABLE.md).
func TestKeyEncodingPinned(t *testing.T) {
	tbl, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	k, err := tbl.EncodeKey(key("ada"))
	if err != nil || string(k) != "\x01\x03ada" {
		t.Fatalf("key bytes %x, %v", k, err)
	}
	if got := BucketOf(k, 16); got != int(xxhash.Sum64String("\x01\x03ada")%16) {
		t.Errorf("bucket %d", got)
	}
	if b, _ := tbl.Bucket(key("ada")); b != BucketOf(k, 2) {
		t.Errorf("Table.Bucket %d", b)
	}
}

func TestClosed(t *testing.T) {
	tbl, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tbl.NewBatch(Writer{}, nil)
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(1), agg.NullValue()})
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	_, err = tbl.Apply(b)
	_, _, gerr := tbl.Get(key("a"))
	_, rerr := tbl.Register("j", "w", nil)
	for name, err := range map[string]error{
		"apply": err, "get": gerr, "register": rerr, "sync": tbl.Sync(), "truncate": tbl.Truncate(0, 0),
		"scan": tbl.Scan(func(Row) error { return nil }), "read log": tbl.ReadLog(0, 0, func(*Entry) error { return nil }),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: %v", name, err)
		}
	}
}

func TestScanPrefix(t *testing.T) {
	tbl, err := Open(t.TempDir(), Schema{
		Key:     []Column{{Name: "region", Type: agg.String}, {Name: "id", Type: agg.Int64}},
		Values:  []Column{{Name: "n", Type: agg.Int64, Func: "sum"}},
		Buckets: 4,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	b, _ := tbl.NewBatch(Writer{}, nil)
	for _, region := range []string{"eu", "eu-west", "us", ""} {
		for id := range 10 {
			_ = b.Upsert(Aggregate, []agg.Value{agg.StringValue(region), agg.IntValue(int64(id))}, []agg.Value{agg.IntValue(1)})
		}
	}
	mustApply(t, tbl, b)
	count := func(prefix ...agg.Value) map[string]int {
		got := map[string]int{}
		if err := tbl.ScanPrefix(prefix, func(r Row) error { got[r.Key[0].Str()]++; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// "eu" must not match "eu-west": the prefix is whole column values.
	if got := count(agg.StringValue("eu")); len(got) != 1 || got["eu"] != 10 {
		t.Errorf("prefix eu: %v", got)
	}
	if got := count(agg.StringValue(""), agg.IntValue(3)); len(got) != 1 || got[""] != 1 {
		t.Errorf("full key as prefix: %v", got)
	}
	if got := count(); len(got) != 4 || got["us"] != 10 || tbl.Count() != 40 {
		t.Errorf("empty prefix: %v, count %d", got, tbl.Count())
	}
	if err := tbl.ScanPrefix([]agg.Value{agg.IntValue(1)}, func(Row) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("prefix of the wrong type: %v", err)
	}
}

func TestOpenEmptyDirWithoutSchema(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Schema{}, Options{}); !errors.Is(err, ErrNoTable) {
		t.Fatalf("open of an empty dir without schema: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed open left %d files", len(entries))
	}
}

func TestWaitLog(t *testing.T) {
	s := smallSchema()
	s.Buckets = 1
	tbl, err := Open(t.TempDir(), s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tbl.WaitLog(ctx, 0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait on an empty log: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- tbl.WaitLog(context.Background(), 0, 0) }()
	b, _ := tbl.NewBatch(Writer{}, nil)
	_ = b.Upsert(Aggregate, key("a"), []agg.Value{agg.IntValue(1), agg.NullValue()})
	mustApply(t, tbl, b)
	if err := <-done; err != nil {
		t.Errorf("wait for the first entry: %v", err)
	}
	go func() { done <- tbl.WaitLog(context.Background(), 0, 1) }()
	_ = tbl.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("wait across close: %v", err)
	}
}

// TestApplyAllocations checks what an Apply allocates per write: a changed
// row once (its encoding, at its size), an unchanged one not at all. The
// batch's own allocations (pebble's batch, the bucket states) are shared by
// its writes.
func TestApplyAllocations(t *testing.T) {
	tbl, err := Open(t.TempDir(), Schema{
		Key:     []Column{{Name: "id", Type: agg.Int64}},
		Values:  []Column{{Name: "total", Type: agg.Int64, Func: "sum"}, {Name: "n", Type: agg.Int64, Func: "count"}, {Name: "top", Type: agg.Int64, Func: "max"}},
		Buckets: 4,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	b, err := tbl.NewBatch(Writer{ID: "w", Epoch: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 1000
	run := func(mode Mode, v int64) {
		for k := range keys {
			if err := b.Upsert(mode, []agg.Value{agg.IntValue(int64(k))}, []agg.Value{agg.IntValue(v), agg.IntValue(1), agg.IntValue(v)}); err != nil {
				t.Fatal(err)
			}
		}
		mustApply(t, tbl, b)
	}
	run(Aggregate, 1) // the keys exist, and the scratch memory is grown
	run(Aggregate, 1)
	v := int64(0)
	// values of several varint bytes, as sums become
	changed := testing.AllocsPerRun(3, func() { v++; run(Aggregate, 1<<40+v) }) / keys
	if changed > 1.2 {
		t.Errorf("an Apply allocates %.2f times per changed row, want about 1", changed)
	}
	run(Overwrite, 7)
	unchanged := testing.AllocsPerRun(3, func() { run(Overwrite, 7) }) / keys
	if unchanged > 0.2 {
		t.Errorf("an Apply allocates %.2f times per unchanged row, want about 0", unchanged)
	}
}
