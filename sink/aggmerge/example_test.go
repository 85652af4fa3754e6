package aggmerge_test

import (
	"fmt"
	"log"
	"os"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

func Example() {
	dir, err := os.MkdirTemp("", "table")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tbl, err := aggmerge.Open(dir, aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "user", Type: agg.String}},
		Values: []aggmerge.Column{
			{Name: "spent", Type: agg.Decimal(18, 2), Func: "sum"},
			{Name: "orders", Type: agg.Int64, Func: "count"},
			{Name: "country", Type: agg.String}, // last_non_null_value
		},
		Buckets: 4,
	}, aggmerge.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer tbl.Close()

	b, err := tbl.NewBatch(aggmerge.Writer{ID: "job-1/sink/0", Epoch: 1}, nil)
	if err != nil {
		log.Fatal(err)
	}
	ada := []agg.Value{agg.StringValue("ada")}
	for _, order := range []struct {
		amount  string
		country agg.Value
	}{{"12.50", agg.StringValue("UK")}, {"7.25", agg.NullValue()}} {
		err := b.Upsert(aggmerge.Aggregate, ada, []agg.Value{
			agg.DecimalValue(decimal.RequireFromString(order.amount)), agg.IntValue(1), order.country})
		if err != nil {
			log.Fatal(err)
		}
	}
	if _, err := tbl.Apply(b); err != nil {
		log.Fatal(err)
	}
	if err := tbl.Sync(); err != nil {
		log.Fatal(err)
	}

	row, _, _ := tbl.Get(ada)
	fmt.Println("row:", row.Values[0].Decimal(), row.Values[1].Int(), row.Values[2].Str())
	bucket, _ := tbl.Bucket(ada)
	_ = tbl.ReadLog(bucket, 0, func(e *aggmerge.Entry) error {
		fmt.Println(e.Offset, e.Op, e.After[0].Decimal(), e.After[1].Int())
		return nil
	})
	// Output:
	// row: 19.75 2 UK
	// 0 +I 12.5 1
	// 1 -U 19.75 2
	// 2 +U 19.75 2
}
