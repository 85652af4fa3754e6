package aggmerge

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// modelSchema covers every value type and most functions, retractable and
// not.
func modelSchema(del DeleteBehavior) Schema {
	return Schema{
		Key: []Column{{Name: "k1", Type: agg.Int64}, {Name: "k2", Type: agg.String}},
		Values: []Column{
			{Name: "sum", Type: agg.Int64, Func: "sum"},
			{Name: "cnt", Type: agg.Int64, Func: "count"},
			{Name: "money", Type: agg.Decimal(12, 2), Func: "sum"},
			{Name: "last", Type: agg.String, Func: "last_value"},
			{Name: "lastnn", Type: agg.Float64},
			{Name: "peak", Type: agg.Int64, Func: "max"},
			{Name: "first", Type: agg.Int64, Func: "first_value"},
			{Name: "tags", Type: agg.String, Func: "listagg", Params: map[string]string{"delimiter": ";"}},
			{Name: "any", Type: agg.Bool, Func: "bool_or"},
			{Name: "set", Type: agg.StringSet, Func: "collect_set"},
			{Name: "users", Type: agg.Bytes, Func: "rbm32"},
			{Name: "seen", Type: agg.Timestamp, Func: "min"},
		},
		Buckets: 4,
		Delete:  del,
	}
}

// mrow is a row of the model.
type mrow struct {
	key  []agg.Value
	vals []agg.Value
}

// model is the plain in-memory table the engine must equal. It applies
// the documented write semantics directly and predicts the log.
type model struct {
	s     Schema
	funcs []*agg.Func
	rows  map[string]mrow
	log   map[int][]Entry // expected entries by bucket
}

func newModel(t *testing.T, s Schema) *model {
	c, funcs, err := s.compile()
	if err != nil {
		t.Fatal(err)
	}
	return &model{s: c, funcs: funcs, rows: map[string]mrow{}, log: map[int][]Entry{}}
}

func (m *model) clone() *model {
	c := *m
	c.rows = make(map[string]mrow, len(m.rows))
	for k, r := range m.rows {
		c.rows[k] = r
	}
	c.log = make(map[int][]Entry, len(m.log))
	for b, es := range m.log {
		c.log[b] = slices.Clone(es)
	}
	return &c
}

type mwrite struct {
	del  bool
	mode Mode
	key  []agg.Value
	vals []agg.Value
}

// apply applies a batch to a copy of the model; on error the model is
// unchanged, as the table must be.
func (m *model) apply(tbl *Table, cols []int, w Writer, undo bool, ws []mwrite, marks []mark) (*model, error) {
	n := m.clone()
	for _, wr := range ws {
		ek, _ := tbl.EncodeKey(wr.key)
		bucket := BucketOf(ek, m.s.Buckets)
		old, exists := n.rows[string(ek)]
		if wr.del && wr.mode == Aggregate {
			if m.s.Delete == DeleteIgnore {
				continue
			}
			if m.s.Delete == DeleteReject {
				return nil, ErrDeleteRejected
			}
		}
		if !exists && wr.del && wr.mode != Retract {
			continue
		}
		oldv := make([]agg.Value, len(m.s.Values))
		if exists {
			copy(oldv, old.vals)
		}
		newv := slices.Clone(oldv)
		for j, c := range cols {
			var in agg.Value
			if wr.vals != nil {
				in, _ = agg.Conform(m.s.Values[c].Type, wr.vals[j])
			}
			var err error
			switch {
			case wr.mode == Retract:
				newv[c], err = n.funcs[c].Retract(oldv[c], in)
			case wr.del:
				newv[c] = agg.Value{}
			case wr.mode == Overwrite:
				newv[c] = in
			default:
				newv[c], err = n.funcs[c].Merge(oldv[c], in)
			}
			if err != nil {
				return nil, err
			}
		}
		after := (wr.mode == Aggregate && !wr.del) || slices.ContainsFunc(newv, func(v agg.Value) bool { return !v.IsNull() })
		if exists == after && (!exists || equalVals(oldv, newv)) {
			continue
		}
		e := Entry{Key: wr.key, Writer: w, Undo: undo}
		switch {
		case !exists:
			e.Op, e.After = Insert, newv
			n.log[bucket] = append(n.log[bucket], e)
		case !after:
			e.Op, e.Before = Delete, oldv
			n.log[bucket] = append(n.log[bucket], e)
		default:
			e.Before, e.After = oldv, newv
			e.Op = UpdateBefore
			n.log[bucket] = append(n.log[bucket], e)
			e.Op = UpdateAfter
			n.log[bucket] = append(n.log[bucket], e)
		}
		if after {
			n.rows[string(ek)] = mrow{key: wr.key, vals: newv}
		} else {
			delete(n.rows, string(ek))
		}
	}
	for _, mk := range marks {
		b := int(mk.bucket)
		n.log[b] = append(n.log[b], Entry{Op: MarkerEntry, Writer: w, Undo: undo, Marker: mk.m})
	}
	return n, nil
}

func equalVals(a, b []agg.Value) bool {
	return slices.EqualFunc(a, b, func(x, y agg.Value) bool {
		return x.State() == y.State() && x.Equal(y)
	})
}

// randomValue draws a value of a column's type; null one time in six,
// occasionally a huge number to provoke overflow.
func randomValue(r *rand.Rand, c Column) agg.Value {
	if r.IntN(6) == 0 {
		return agg.NullValue()
	}
	switch c.Type.Kind {
	case agg.KindInt64:
		if r.IntN(200) == 0 {
			return agg.IntValue(math.MaxInt64 - int64(r.IntN(3)))
		}
		return agg.IntValue(int64(r.IntN(21) - 10))
	case agg.KindDecimal:
		return agg.DecimalValue(decimal.New(int64(r.IntN(2001)-1000), -2))
	case agg.KindString:
		return agg.StringValue([]string{"", "x", "y", "zz"}[r.IntN(4)])
	case agg.KindFloat64:
		return agg.FloatValue(float64(r.IntN(9)) / 4)
	case agg.KindBool:
		return agg.BoolValue(r.IntN(2) == 0)
	case agg.KindStringSet:
		return agg.SetValue([]string{"", "a", "b", "c"}[r.IntN(4)])
	case agg.KindBytes:
		return agg.Bitmap32Value(uint32(r.IntN(20)), uint32(r.IntN(20)))
	case agg.KindTimestamp:
		return agg.MicrosValue(int64(r.IntN(1000)))
	}
	panic(c.Type)
}

// checkTable compares the table's rows with the model's, by scan, by get
// and by count.
func checkTable(t *testing.T, tbl *Table, m *model, where string) {
	t.Helper()
	got := map[string]mrow{}
	err := tbl.Scan(func(r Row) error {
		k, _ := tbl.EncodeKey(r.Key)
		got[string(k)] = mrow{key: slices.Clone(r.Key), vals: slices.Clone(r.Values)}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: scan: %v", where, err)
	}
	if len(got) != len(m.rows) || tbl.Count() != uint64(len(m.rows)) {
		t.Fatalf("%s: table has %d rows (count %d), model %d", where, len(got), tbl.Count(), len(m.rows))
	}
	for k, want := range m.rows {
		g, ok := got[k]
		if !ok || !equalVals(g.vals, want.vals) {
			t.Fatalf("%s: key %v: table %v, model %v", where, want.key, g.vals, want.vals)
		}
		r, ok, err := tbl.Get(want.key)
		if err != nil || !ok || !equalVals(r.Values, want.vals) {
			t.Fatalf("%s: get %v = %v, %v, %v; model %v", where, want.key, r.Values, ok, err, want.vals)
		}
	}
}

// pastRows are the model's rows when the table's log ended at ends.
type pastRows struct {
	where string
	ends  []uint64
	rows  map[string]mrow
}

func pastRowsOf(tbl *Table, m *model, where string) pastRows {
	p := pastRows{where: where, ends: tbl.LogEnds(), rows: map[string]mrow{}}
	for k, r := range m.rows {
		p.rows[k] = mrow{key: slices.Clone(r.key), vals: slices.Clone(r.vals)}
	}
	return p
}

// checkTableAt checks that RowsAt at p's log ends gives p's rows, each
// under its encoded key.
func checkTableAt(t *testing.T, tbl *Table, p pastRows) {
	t.Helper()
	got := map[string][]agg.Value{}
	rs, err := tbl.RowsAt(p.ends)
	if err == nil {
		err = rs.Each(func(ek []byte, r Row) error {
			k, _ := tbl.EncodeKey(r.Key)
			if string(k) != string(ek) {
				t.Fatalf("%s: RowsAt(%v) gives key %v as %x, it encodes as %x", p.where, p.ends, r.Key, ek, k)
			}
			if _, dup := got[string(k)]; dup {
				t.Fatalf("%s: RowsAt(%v) gives key %v twice", p.where, p.ends, r.Key)
			}
			got[string(k)] = slices.Clone(r.Values)
			return nil
		})
	}
	if err != nil {
		t.Fatalf("%s: RowsAt(%v): %v", p.where, p.ends, err)
	}
	if len(got) != len(p.rows) || rs.Len() != len(p.rows) {
		t.Fatalf("%s: RowsAt(%v) gives %d rows (Len %d), the model had %d", p.where, p.ends, len(got), rs.Len(), len(p.rows))
	}
	for k, want := range p.rows {
		if g, ok := got[k]; !ok || !equalVals(g, want.vals) {
			t.Fatalf("%s: RowsAt(%v): key %v: %v, the model had %v", p.where, p.ends, want.key, g, want.vals)
		}
	}
}

// replayer rebuilds rows from the log, checking each entry against the
// model's prediction and each before-image against the replayed row.
type replayer struct {
	rows map[string][]agg.Value
	next []uint64 // next offset to read, by bucket
	seen []int    // model entries matched, by bucket
}

func (rp *replayer) catchUp(t *testing.T, tbl *Table, m *model, where string) {
	t.Helper()
	for b := range tbl.Schema().Buckets {
		err := tbl.ReadLog(b, rp.next[b], func(e *Entry) error {
			if e.Offset != rp.next[b] {
				return fmt.Errorf("offset %d, want %d", e.Offset, rp.next[b])
			}
			rp.next[b]++
			exp := m.log[b]
			if rp.seen[b] >= len(exp) {
				return fmt.Errorf("unexpected entry %v %v", e.Op, e.Key)
			}
			want := exp[rp.seen[b]]
			rp.seen[b]++
			if e.Op != want.Op || !equalVals(e.Key, want.Key) || !equalVals(e.Before, want.Before) ||
				!equalVals(e.After, want.After) || e.Writer != want.Writer || e.Undo != want.Undo || e.Marker != want.Marker {
				return fmt.Errorf("entry %d: %v %v %v->%v by %v, model %v %v %v->%v by %v", e.Offset,
					e.Op, e.Key, e.Before, e.After, e.Writer, want.Op, want.Key, want.Before, want.After, want.Writer)
			}
			if e.Op == MarkerEntry {
				return nil
			}
			k, _ := tbl.EncodeKey(e.Key)
			cur, ok := rp.rows[string(k)]
			switch e.Op {
			case Insert:
				if ok {
					return fmt.Errorf("+I of existing key %v", e.Key)
				}
				rp.rows[string(k)] = e.After
			case UpdateBefore, Delete:
				if !ok || !equalVals(cur, e.Before) {
					return fmt.Errorf("%v before-image %v, replayed row %v", e.Op, e.Before, cur)
				}
				if e.Op == Delete {
					delete(rp.rows, string(k))
				}
			case UpdateAfter:
				rp.rows[string(k)] = e.After
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: bucket %d: %v", where, b, err)
		}
		if rp.seen[b] != len(m.log[b]) {
			t.Fatalf("%s: bucket %d: %d entries read, model has %d", where, b, rp.seen[b], len(m.log[b]))
		}
	}
	if len(rp.rows) != len(m.rows) {
		t.Fatalf("%s: replayed %d rows, model %d", where, len(rp.rows), len(m.rows))
	}
	for k, r := range m.rows {
		if !equalVals(rp.rows[k], r.vals) {
			t.Fatalf("%s: key %v replayed %v, model %v", where, r.key, rp.rows[k], r.vals)
		}
	}
}

func newReplayer(buckets int) *replayer {
	return &replayer{rows: map[string][]agg.Value{}, next: make([]uint64, buckets), seen: make([]int, buckets)}
}

// TestModel runs random batches (every mode, partial updates, deletes,
// nulls, overflows) against the model. After each batch the rows must equal
// the model, and the log read so far must replay to the same rows; at the
// end the whole log replayed from offset 0 must too. Reopening midway checks
// that nothing lives only in memory.
func TestModel(t *testing.T) {
	cases := []struct {
		del       DeleteBehavior
		cacheRows int
	}{{DeleteAllow, 0}, {DeleteReject, 0}, {DeleteIgnore, 8}}
	for i, tc := range cases {
		t.Run(string(tc.del), func(t *testing.T) {
			seed := uint64(1000 + i)
			t.Logf("seed %d", seed)
			runModel(t, seed, modelSchema(tc.del), Options{CacheRows: tc.cacheRows}, 1000)
		})
	}
}

func runModel(t *testing.T, seed uint64, s Schema, opts Options, batches int) {
	r := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	tbl, err := Open(dir, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tbl.Close() }()
	m := newModel(t, s)
	rp := newReplayer(s.Buckets)
	var applied, failed, entries int
	var past []pastRows // every 50 batches: the log ends and the rows then
	for bi := range batches {
		where := fmt.Sprintf("seed %d batch %d", seed, bi)
		var names []string
		var cols []int
		if r.IntN(3) > 0 {
			for c, col := range s.Values {
				if r.IntN(2) == 0 {
					names = append(names, col.Name)
					cols = append(cols, c)
				}
			}
		}
		if len(cols) == 0 {
			names = nil
			for c := range s.Values {
				cols = append(cols, c)
			}
		}
		w := Writer{ID: fmt.Sprintf("w%d", r.IntN(3)), Epoch: uint64(r.IntN(4))}
		b, err := tbl.NewBatch(w, names)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		undo := r.IntN(10) == 0
		b.SetUndo(undo)
		var marks []mark
		if r.IntN(8) == 0 {
			mk := mark{bucket: uint32(r.IntN(s.Buckets)), m: Marker{Kind: MarkerCommit, Checkpoint: uint64(bi), From: uint64(r.IntN(9)), To: 9}}
			if err := b.Mark(int(mk.bucket), mk.m); err != nil {
				t.Fatal(err)
			}
			marks = append(marks, mk)
		}
		var ws []mwrite
		for range 1 + r.IntN(12) {
			wr := mwrite{key: []agg.Value{agg.IntValue(int64(r.IntN(40))), agg.StringValue([]string{"", "a"}[r.IntN(2)])}}
			switch x := r.IntN(20); {
			case x < 11:
				wr.mode = Aggregate
			case x < 14:
				wr.mode = Overwrite
			case x < 16:
				wr.mode = Retract
			case x < 18:
				wr.del, wr.mode = true, Aggregate
			default:
				wr.del, wr.mode = true, Overwrite
			}
			if !wr.del || wr.mode == Retract {
				for _, c := range cols {
					wr.vals = append(wr.vals, randomValue(r, s.Values[c]))
				}
			}
			if wr.del {
				err = b.Delete(wr.mode, wr.key, wr.vals)
			} else {
				err = b.Upsert(wr.mode, wr.key, wr.vals)
			}
			retractable := !slices.ContainsFunc(cols, func(c int) bool { return !m.funcs[c].CanRetract() })
			if wr.mode == Retract && !retractable {
				if !errors.Is(err, agg.ErrCannotRetract) {
					t.Fatalf("%s: retract of non-retractable columns: %v", where, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: add write: %v", where, err)
			}
			ws = append(ws, wr)
		}
		next, merr := m.apply(tbl, cols, w, undo, ws, marks)
		res, err := tbl.Apply(b)
		if (merr == nil) != (err == nil) || (merr != nil && !errors.Is(err, merr) && !errors.Is(err, agg.ErrOverflow) && !errors.Is(err, agg.ErrCannotRetract)) {
			t.Fatalf("%s: table error %v, model error %v", where, err, merr)
		}
		if err == nil {
			applied++
			got := 0
			for bk := range next.log {
				got += len(next.log[bk]) - len(m.log[bk])
			}
			if res.Entries != got {
				t.Fatalf("%s: %d entries appended, model %d", where, res.Entries, got)
			}
			entries += got
			m = next
		} else {
			failed++
		}
		checkTable(t, tbl, m, where)
		rp.catchUp(t, tbl, m, where)
		if bi%50 == 0 {
			past = append(past, pastRowsOf(tbl, m, where))
		}
		if bi == batches/2 {
			if err := tbl.Close(); err != nil {
				t.Fatal(err)
			}
			if tbl, err = Open(dir, s, opts); err != nil {
				t.Fatalf("%s: reopen: %v", where, err)
			}
			checkTable(t, tbl, m, where+" after reopen")
		}
	}
	full := newReplayer(s.Buckets)
	full.catchUp(t, tbl, m, "full replay from offset 0")
	for _, p := range past {
		checkTableAt(t, tbl, p)
	}
	t.Logf("%d batches applied, %d failed as the model predicted, %d log entries, %d rows", applied, failed, entries, len(m.rows))
	if failed == 0 || entries == 0 {
		t.Errorf("the random batches never failed (%d) or never logged (%d): the test lost its teeth", failed, entries)
	}
}
