package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestRowMakerMatchesJSON: rowMaker makes exactly the rows and keys that
// the changelog's JSON (appendKey, appendRow) decodes to, for seeded
// random values of every kind, with the edges of each: floats whose text
// reads back as an integer (0, -0, 123456) or not (1e6, 0.1, 1e300),
// strings with escapes and invalid UTF-8, empty sets, nulls and absent
// values.
func TestRowMakerMatchesJSON(t *testing.T) {
	seed := seed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	s := &aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: agg.String}, {Name: "n", Type: agg.Int64}},
		Values: []aggmerge.Column{
			{Name: "b", Type: agg.Bool}, {Name: "i", Type: agg.Int64}, {Name: "f", Type: agg.Float64},
			{Name: "d", Type: agg.Decimal(18, 3)}, {Name: "s", Type: agg.String}, {Name: "y", Type: agg.Bytes},
			{Name: "t", Type: agg.Timestamp}, {Name: "set", Type: agg.StringSet},
		},
	}
	strs := []string{"", "plain", "q\"b\\", "\x00\x1f\t\r\n", "é漢字🙂", "bad\xffutf8", "\xff\xfe\xc3", "<tag>&"}
	floats := []float64{0, math.Copysign(0, -1), 1, -7, 123456, 999999, 1e6, 1e21, 0.1, -2.5, 1e-7, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64}
	str := func() string {
		if rng.IntN(2) == 0 {
			return strs[rng.IntN(len(strs))]
		}
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	value := func(ty agg.Type) agg.Value {
		switch rng.IntN(10) {
		case 0:
			return agg.Value{} // absent
		case 1:
			return agg.NullValue()
		}
		var v agg.Value
		switch ty.Kind {
		case agg.KindBool:
			v = agg.BoolValue(rng.IntN(2) == 0)
		case agg.KindInt64:
			v = agg.IntValue(int64(rng.Uint64()))
		case agg.KindFloat64:
			if rng.IntN(2) == 0 {
				v = agg.FloatValue(floats[rng.IntN(len(floats))])
			} else {
				v = agg.FloatValue(math.Float64frombits(rng.Uint64()))
			}
			if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
				v = agg.FloatValue(float64(rng.IntN(1000)) / 8)
			}
		case agg.KindDecimal:
			v = agg.DecimalValue(decimal.New(rng.Int64N(1e12)-5e11, -int32(rng.IntN(4))))
		case agg.KindString:
			v = agg.StringValue(str())
		case agg.KindBytes:
			v = agg.BytesValue([]byte(str()))
		case agg.KindTimestamp:
			v = agg.TimestampValue(time.UnixMicro(rng.Int64N(4e15)))
		case agg.KindStringSet:
			var elems []string
			for range rng.IntN(4) {
				elems = append(elems, str())
			}
			v = agg.SetValue(elems...)
		}
		v, err := agg.Conform(ty, v)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return v
	}
	m := newRowMaker(s)
	var dec kafka.RowDecoder
	var buf []byte
	kinds := map[kafka.Kind]int{}
	for i := range 20_000 {
		key := []agg.Value{agg.StringValue(str()), agg.IntValue(int64(i))}
		vals := make([]agg.Value, len(s.Values))
		for c, col := range s.Values {
			vals[c] = value(col.Type)
		}
		got, err := m.row(key, vals)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		buf = appendRow(buf[:0], s, key, vals)
		want, err := dec.Decode(buf)
		if err != nil {
			t.Fatalf("seed %d: decode %s: %v", seed, buf, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: row %s made as %s (%#v), the JSON decodes to %#v", seed, buf, got, got, want)
		}
		if k, want := m.key(key), string(appendKey(nil, s, key)); k != want {
			t.Fatalf("seed %d: key %q, the JSON is %q", seed, k, want)
		}
		f, _ := got.Get("f")
		kinds[f.Kind()]++
	}
	if kinds[kafka.Int] == 0 || kinds[kafka.Float] == 0 || kinds[kafka.Null] == 0 {
		t.Fatalf("seed %d: the float column read back as %v: not every case was made", seed, kinds)
	}
}

// TestRowsAtEqualsChangelog is the oracle of the hosting runner's fast
// path: at every version of a seeded random workload (upserts that update
// the keys' sums, sets and timestamps; deletes; keys deleted and written
// again), Exporter.RowsAt (the table now and its log's before-images, no
// Kafka) equals the changelog read to the version's end offsets
// (ReadTable), checked again after every later round moved the table on;
// in both changelog formats. Once the log is truncated, an old version is
// ErrPastRetention naming the bucket's log start and the version's offset,
// and the newest still reads.
func TestRowsAtEqualsChangelog(t *testing.T) {
	for _, f := range []Format{UpsertJSON, DebeziumJSON} {
		t.Run(string(f), func(t *testing.T) {
			seed := seed(t)
			brokers := kafkatest.Brokers(t)
			tbl := openTable(t, t.TempDir())
			conn := kafka.Connection{Brokers: brokers}
			topic := kafkatest.TopicName(t, brokers)
			x, stop := startExporter(t, Config{Table: tbl, Name: "t", Topic: topic, Kafka: conn, Format: f,
				CheckpointInterval: 50 * time.Millisecond})
			m := newMultiWriter(t, tbl, seed)
			// past counts the checks of a version whose row count the
			// table no longer has: rows inserted or deleted since, which
			// RowsAt must undo from the log.
			past := 0
			check := func(v *Version) {
				t.Helper()
				rows, ok, err := x.RowsAt(v)
				if err != nil || !ok {
					t.Fatalf("seed %d: rows at version %d: ok %v, %v", seed, v.Version, ok, err)
				}
				got, err := rows.Map()
				if err != nil || rows.Len() != len(got) {
					t.Fatalf("seed %d: rows at version %d: %d rows made of Len %d, %v", seed, v.Version, len(got), rows.Len(), err)
				}
				want, err := ReadTable(context.Background(), ReaderConfig{Kafka: conn, Topic: topic, Format: f, Until: v.EndOffsets})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d: version %d (table now at %v): RowsAt has %d rows, the changelog %d:\n%v\n%v",
						seed, v.Version, tbl.LogEnds(), len(got), len(want), got, want)
				}
				if uint64(len(want)) != tbl.Count() {
					past++
				}
				sorted, err := rows.Sorted()
				if err != nil || len(sorted) != len(want) {
					t.Fatalf("seed %d: version %d: Sorted gives %d rows, the changelog %d: %v", seed, v.Version, len(sorted), len(want), err)
				}
				for i, k := range slices.Sorted(maps.Keys(want)) {
					if !reflect.DeepEqual(sorted[i], want[k]) {
						t.Fatalf("seed %d: version %d: Sorted gives %v at %d, the changelog's row of key %s is %v", seed, v.Version, sorted[i], i, k, want[k])
					}
				}
			}
			var vs []Version
			deletes := 0
			for range 12 {
				m.batch(1 + m.rng.Intn(60))
				m.checkpoint()
				if err := tbl.RecordCheckpoint(m.w, m.ckpt, 0); err != nil {
					t.Fatal(err)
				}
				vs = append(vs, waitVersion(t, x, map[string]uint64{"job": m.ckpt}))
				for i := range vs {
					check(&vs[i])
				}
			}
			for b := range testBuckets {
				if err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
					if e.Op == aggmerge.Delete {
						deletes++
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if deletes == 0 || past == 0 || len(vs[0].EndOffsets) != testBuckets {
				t.Fatalf("seed %d: %d deletes, %d checks of a version with other rows than now, versions %+v: the workload lost its teeth", seed, deletes, past, vs)
			}
			if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			for b, end := range tbl.LogEnds() {
				if err := tbl.Truncate(b, end); err != nil {
					t.Fatal(err)
				}
			}
			_, ok, err := x.RowsAt(&vs[0])
			if !errors.Is(err, ErrPastRetention) || ok || !strings.Contains(err.Error(), "below log start") ||
				!strings.Contains(err.Error(), fmt.Sprintf("version %d", vs[0].Version)) {
				t.Fatalf("seed %d: version %d read from the truncated table: ok %v, %v; want ErrPastRetention naming it", seed, vs[0].Version, ok, err)
			}
			check(&vs[len(vs)-1])
		})
	}
}
