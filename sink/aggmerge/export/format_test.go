package export

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenTable has a column of every type, written by a plain writer.
func goldenTable(t *testing.T) *aggmerge.Table {
	t.Helper()
	tbl, err := aggmerge.Open(t.TempDir(), aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "region", Type: agg.String}, {Name: "day", Type: agg.Timestamp}},
		Values: []aggmerge.Column{
			{Name: "orders", Type: agg.Int64, Func: "count"},
			{Name: "spent", Type: agg.Decimal(12, 2), Func: "sum"},
			{Name: "ratio", Type: agg.Float64, Func: "last_value"},
			{Name: "vip", Type: agg.Bool, Func: "bool_or"},
			{Name: "note", Type: agg.String, Func: "last_value"},
			{Name: "blob", Type: agg.Bytes, Func: "last_value"},
			{Name: "tags", Type: agg.StringSet, Func: "collect_set"},
		},
		Buckets: 1,
		Delete:  aggmerge.DeleteAllow,
	}, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	day := agg.TimestampValue(time.Date(2025, 1, 2, 0, 0, 0, 1000, time.UTC))
	key := []agg.Value{agg.StringValue("EU \"west\"\n"), day}
	write := func(del bool, vals ...agg.Value) {
		b, err := tbl.NewBatch(aggmerge.Writer{ID: "plain"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if del {
			err = b.Delete(aggmerge.Aggregate, key, nil)
		} else {
			err = b.Upsert(aggmerge.Aggregate, key, vals)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	write(false, agg.IntValue(1), agg.DecimalValue(decimal.RequireFromString("12.50")), agg.FloatValue(0.25),
		agg.BoolValue(false), agg.StringValue("first é"), agg.BytesValue([]byte{0, 1, 0xfe}), agg.SetValue("b", "a"))
	write(false, agg.IntValue(1), agg.DecimalValue(decimal.RequireFromString("0.05")), agg.FloatValue(1e21),
		agg.BoolValue(true), agg.NullValue(), agg.BytesValue(nil), agg.SetValue("c"))
	write(true)
	return tbl
}

// TestFormatsGolden encodes an insert, an update and a delete of every
// column type in both formats and compares them with testdata; every
// value must also be valid JSON.
func TestFormatsGolden(t *testing.T) {
	for _, f := range []Format{UpsertJSON, DebeziumJSON} {
		t.Run(string(f), func(t *testing.T) {
			tbl := goldenTable(t)
			codec, err := f.codec()
			if err != nil {
				t.Fatal(err)
			}
			enc := encoder{schema: tbl.Schema(), table: "orders", id: "00000000-0000-0000-0000-000000000000", txnID: "ebbflow-0123456789abcdef-shop-orders", codec: codec, topic: "orders-changelog",
				now: func() time.Time { return time.UnixMilli(1_735_776_000_123) }}
			c := &cursor{}
			chs, err := uncommittedChanges(tbl, c, tbl.LogEnds()[0], 100)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			for i := range chs {
				for _, r := range enc.records(nil, 0, &chs[i]) {
					for _, b := range [][]byte{r.Key, r.Value} {
						if b != nil && !json.Valid(b) {
							t.Fatalf("invalid JSON: %s", b)
						}
					}
					fmt.Fprintf(&out, "partition %d\nkey   %s\nvalue %s\n", r.Partition, r.Key, orNull(r.Value))
					for _, h := range r.Headers {
						fmt.Fprintf(&out, "  %s: %s\n", h.Key, h.Value)
					}
					out.WriteString("\n")
				}
			}
			path := filepath.Join("testdata", string(f)+".golden")
			if *update {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("%s differs (rerun with -update and review the diff):\n%s", path, out.Bytes())
			}
		})
	}
}

func orNull(b []byte) []byte {
	if b == nil {
		return []byte("null (tombstone)")
	}
	return b
}

// TestEncoderAllocatesPerChunk: encoding a change allocates nothing of its
// own: its records, headers and bytes come from chunks that hundreds of
// records share.
func TestEncoderAllocatesPerChunk(t *testing.T) {
	ch := change{op: aggmerge.UpdateAfter, offset: 123_456, key: []agg.Value{agg.IntValue(4711)},
		before: []agg.Value{agg.IntValue(10), agg.IntValue(2), agg.IntValue(1_700_000_000_000_000)},
		after:  []agg.Value{agg.IntValue(25), agg.IntValue(3), agg.IntValue(1_700_000_000_000_001)}, checkpoint: 17, resume: 123_450}
	for _, f := range []Format{UpsertJSON, DebeziumJSON} {
		codec, err := f.codec()
		if err != nil {
			t.Fatal(err)
		}
		enc := encoder{schema: benchSchema(), table: "totals", id: "00000000-0000-0000-0000-000000000000", txnID: "ebbflow-export-totals",
			codec: codec, topic: "totals-changelog", now: time.Now}
		var recs []*kgo.Record
		if allocs := testing.AllocsPerRun(2000, func() { recs = enc.records(recs[:0], 1, &ch) }); allocs > 0.1 {
			t.Errorf("%s: %.2f allocations per change, want at most 0.1", f, allocs)
		}
		if r := recs[0]; r.Partition != 1 || len(r.Headers) != numHeaders || string(header(r, HeaderOffset)) != "123456" {
			t.Errorf("%s: record %+v", f, r)
		}
	}
}
