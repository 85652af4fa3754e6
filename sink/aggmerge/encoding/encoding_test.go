package encoding

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

var (
	keyTypes = []agg.Type{agg.Int64, agg.String, agg.Bool, agg.Float64, agg.Timestamp, agg.Decimal(30, 3), agg.Bytes}
	rowTypes = []agg.Type{agg.Int64, agg.String, agg.Bool, agg.Float64, agg.Timestamp, agg.Decimal(30, 3), agg.Bytes, agg.StringSet, agg.Decimal(30, 3)}
)

func sampleKey() []agg.Value {
	return []agg.Value{
		agg.IntValue(-42), agg.StringValue("k\x00y"), agg.BoolValue(true), agg.FloatValue(-1.5),
		agg.MicrosValue(1_700_000_000_000_000), agg.DecimalValue(decimal.RequireFromString("-12345678901234567890123.456")),
		agg.BytesValue([]byte{0, 1, 2}),
	}
}

func sampleRow() []agg.Value {
	return []agg.Value{
		agg.IntValue(math.MinInt64), agg.StringValue(""), agg.NullValue(), agg.FloatValue(math.SmallestNonzeroFloat64),
		{}, agg.DecimalValue(decimal.RequireFromString("12.500")), agg.BytesValue(nil), agg.SetValue("b", "a", ""),
		agg.DecimalValue(decimal.RequireFromString("-99999999999999999999999.999")),
	}
}

func equalVals(a, b []agg.Value) bool {
	return slices.EqualFunc(a, b, func(x, y agg.Value) bool { return x.Equal(y) })
}

func TestKeyRoundTrip(t *testing.T) {
	k, err := AppendKey(nil, keyTypes, sampleKey())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeKey(k, keyTypes, nil)
	if err != nil || !equalVals(got, sampleKey()) {
		t.Fatalf("DecodeKey = %v, %v", got, err)
	}
	prefix, err := AppendKey(nil, keyTypes, sampleKey()[:2])
	if err != nil || !bytes.HasPrefix(k, prefix) {
		t.Fatalf("a key prefix is not a byte prefix: %x vs %x (%v)", prefix, k, err)
	}
	if _, err := AppendKey(nil, keyTypes[:1], []agg.Value{agg.NullValue()}); err == nil {
		t.Error("null key column encoded")
	}
}

func TestKeyOrder(t *testing.T) {
	ints := []int64{math.MinInt64, -5, -1, 0, 1, 7, math.MaxInt64}
	floats := []float64{math.Inf(-1), -2.5, -0.1, 0, 0.1, 3, math.Inf(1)}
	var prev []byte
	for i, n := range ints {
		k, _ := AppendKey(nil, []agg.Type{agg.Int64}, []agg.Value{agg.IntValue(n)})
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			t.Errorf("int key %d does not sort after %d", n, ints[i-1])
		}
		prev = k
	}
	for i, f := range floats {
		k, _ := AppendKey(nil, []agg.Type{agg.Float64}, []agg.Value{agg.FloatValue(f)})
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			t.Errorf("float key %v does not sort after %v", f, floats[i-1])
		}
		prev = k
	}
}

func TestRowRoundTrip(t *testing.T) {
	r := AppendRow(nil, rowTypes, sampleRow())
	got, err := DecodeRow(r, rowTypes, nil)
	if err != nil || !equalVals(got, sampleRow()) {
		t.Fatalf("DecodeRow = %v, %v", got, err)
	}
	if got[4].State() != agg.Absent || got[2].State() != agg.Null {
		t.Errorf("absent and null not kept apart: %v %v", got[4].State(), got[2].State())
	}
	for i := range r {
		if _, err := DecodeRow(r[:i], rowTypes, nil); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated row of %d bytes: %v", i, err)
		}
	}
}

func sampleChunk() []byte {
	k, _ := AppendKey(nil, keyTypes, sampleKey())
	r := AppendRow(nil, rowTypes, sampleRow())
	c := AppendChunkHeader(nil, ChunkHeader{Writer: "job/sink/3", Epoch: 7, Undo: true}, 4)
	c = AppendRecord(c, Record{Op: OpInsert, Key: k, After: r})
	c = AppendRecord(c, Record{Op: OpUpdate, Key: k, Before: r, After: r})
	c = AppendRecord(c, Record{Op: OpDelete, Key: k, Before: r})
	return AppendRecord(c, Record{Op: OpMarker, Marker: Marker{Kind: MarkerRollback, Checkpoint: 9, From: 3, To: 11}})
}

func TestChunkRoundTrip(t *testing.T) {
	h, recs, err := DecodeChunk(sampleChunk())
	if err != nil {
		t.Fatal(err)
	}
	if h != (ChunkHeader{Writer: "job/sink/3", Epoch: 7, Undo: true}) || len(recs) != 4 || ChunkOffsets(recs) != 5 {
		t.Fatalf("header %+v, %d records, %d offsets", h, len(recs), ChunkOffsets(recs))
	}
	if recs[0].Before != nil || recs[2].After != nil || recs[1].Before == nil || recs[3].Marker.To != 11 {
		t.Errorf("records %+v", recs)
	}
}

func TestBucketState(t *testing.T) {
	s := BucketState{LogStart: 3, LogEnd: 1 << 40, Rows: 12}
	got, err := DecodeBucketState(AppendBucketState(nil, s))
	if err != nil || got != s {
		t.Errorf("bucket state %+v, %v", got, err)
	}
	if _, err := DecodeBucketState(AppendBucketState(nil, BucketState{LogStart: 2, LogEnd: 1})); err == nil {
		t.Error("start beyond end accepted")
	}
}

func TestRowsAt(t *testing.T) {
	for _, off := range []uint64{0, 1, 1 << 40} {
		if got, err := DecodeRowsAt(AppendRowsAt(nil, off)); err != nil || got != off {
			t.Errorf("rows offset %d: %d, %v", off, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {Version + 1, 0}, {Version}, append(AppendRowsAt(nil, 3), 0)} {
		if _, err := DecodeRowsAt(bad); err == nil {
			t.Errorf("rows offset %x accepted", bad)
		}
	}
}

// The fuzz targets feed arbitrary bytes to each decoder: it must return an
// error or values that encode and decode to the same values, never panic.

func FuzzDecodeKey(f *testing.F) {
	k, _ := AppendKey(nil, keyTypes, sampleKey())
	f.Add(k)
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := DecodeKey(b, keyTypes, nil)
		if err != nil {
			return
		}
		again, err := AppendKey(nil, keyTypes, vals)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := DecodeKey(again, keyTypes, nil); err != nil || !equalVals(back, vals) {
			t.Fatalf("key does not round-trip: %v vs %v (%v)", vals, back, err)
		}
	})
}

func FuzzDecodeRow(f *testing.F) {
	f.Add(AppendRow(nil, rowTypes, sampleRow()))
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := DecodeRow(b, rowTypes, nil)
		if err != nil {
			return
		}
		if back, err := DecodeRow(AppendRow(nil, rowTypes, vals), rowTypes, nil); err != nil || !equalVals(back, vals) {
			t.Fatalf("row does not round-trip: %v vs %v (%v)", vals, back, err)
		}
	})
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(sampleChunk())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, recs, err := DecodeChunk(b)
		if err != nil {
			return
		}
		c := AppendChunkHeader(nil, h, len(recs))
		for _, r := range recs {
			c = AppendRecord(c, r)
		}
		h2, recs2, err := DecodeChunk(c)
		if err != nil || h2 != h || len(recs2) != len(recs) {
			t.Fatalf("chunk does not round-trip: %+v %d vs %+v %d (%v)", h, len(recs), h2, len(recs2), err)
		}
	})
}

func FuzzDecodeBucketState(f *testing.F) {
	f.Add(AppendBucketState(nil, BucketState{LogStart: 1, LogEnd: 2, Rows: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeBucketState(b)
		if err == nil && s.LogStart > s.LogEnd {
			t.Fatalf("bad state %+v decoded", s)
		}
	})
}
