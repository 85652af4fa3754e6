// Command revenuego is the exactly-once table sink from Go: orders are
// produced to a topic of the embedded Kafka broker, read by the Kafka source,
// and aggregated per region (total, count, largest order, last customer)
// into an aggregation-merge table whose writes are undone past the last
// checkpoint after a crash.
//
//	go run ./examples/revenuego -data ./data/revenuego
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

// Order is one input record.
type Order struct {
	Seq      int    `json:"seq"`
	Customer string `json:"customer"`
	Region   string `json:"region"`
	Cents    int64  `json:"cents"`
}

var regions = []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south"}

// OrderOf is order number i: deterministic, so a test can compute the
// expected table.
func OrderOf(i int) Order {
	return Order{Seq: i, Customer: fmt.Sprintf("c%03d", i%97), Region: regions[i%len(regions)], Cents: int64(100 + i%900)}
}

// Schema is the revenue table: one row per region.
func Schema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "region", Type: agg.Type{Kind: agg.KindString}}},
		Values: []aggmerge.Column{
			{Name: "total_cents", Type: i64, Func: "sum"},
			{Name: "orders", Type: i64, Func: "count"},
			{Name: "largest", Type: i64, Func: "max"},
			{Name: "last_customer", Type: agg.Type{Kind: agg.KindString}, Func: "last_value"},
		},
		Buckets: 4,
	}
}

func main() {
	data := flag.String("data", "./data/revenuego", "data directory")
	n := flag.Int("orders", 10_000, "orders to produce")
	flag.Parse()
	tbl, err := Run(context.Background(), *data, *n, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "revenuego:", err)
		os.Exit(1)
	}
	defer tbl.Close()
	_ = tbl.Scan(func(r aggmerge.Row) error {
		fmt.Printf("%-9s total %8d cents over %5d orders, largest %d, last customer %s\n",
			r.Key[0].Str(), r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int(), r.Values[3].Str())
		return nil
	})
}

// Run produces n orders to the embedded broker and aggregates them into the
// table under data until all are in; it returns the open table.
func Run(ctx context.Context, data string, n int, log *slog.Logger) (*aggmerge.Table, error) {
	broker, err := embedded.Start(embedded.Options{Partitions: 4})
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	if err := produce(ctx, broker.Addrs(), n); err != nil {
		return nil, err
	}
	tbl, err := aggmerge.Open(filepath.Join(data, "tables", "revenue"), Schema(), aggmerge.Options{})
	if err != nil {
		return nil, err
	}
	j := runtime.NewJob(runtime.Options{Name: "revenue", DataDir: data, Parallelism: 2, Logger: log,
		StateBackend: pebblestate.NewFactory(pebblestate.Options{}),
		Checkpoint:   runtime.CheckpointOptions{Interval: time.Second}})
	src, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: broker.Addrs()}, Topics: []string{"orders"}}, kafka.JSON[Order]())
	if err != nil {
		tbl.Close()
		return nil, err
	}
	orders := runtime.FromSource(j, "orders", src.New)
	err = writer.To(orders, "revenue", writer.Config{Table: tbl}, func(o Order, r *writer.Row) error {
		r.Kind = runtime.RowInsert
		r.Key = append(r.Key[:0], agg.StringValue(o.Region))
		r.Vals = append(r.Vals[:0], agg.IntValue(o.Cents), agg.IntValue(1), agg.IntValue(o.Cents), agg.StringValue(o.Customer))
		return nil
	})
	if err != nil {
		tbl.Close()
		return nil, err
	}
	// The source is unbounded: stop with a final checkpoint once every order
	// is counted. The watcher is owned here: it ends when the job does, and
	// Run returns only after it has.
	ran := make(chan struct{})
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		for {
			var counted int64
			_ = tbl.Scan(func(r aggmerge.Row) error { counted += r.Values[1].Int(); return nil })
			if counted >= int64(n) {
				j.Stop()
				return
			}
			select {
			case <-ran:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	err = j.Run(ctx)
	close(ran)
	watching.Wait()
	if err != nil {
		tbl.Close()
		return nil, err
	}
	return tbl, nil
}

func produce(ctx context.Context, brokers []string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("orders"), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v, _ := json.Marshal(OrderOf(i))
		o := OrderOf(i)
		recs[i] = &kgo.Record{Key: []byte(o.Region), Value: v}
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
