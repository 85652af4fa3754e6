package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// A job that sums order amounts per user from JSON records, sending
// undecodable ones to a dead-letter topic.
func ExampleNewSource() {
	src, err := kafka.NewSource(kafka.Config{
		Connection:      kafka.Connection{Brokers: []string{"127.0.0.1:9092"}},
		Topics:          []string{"orders"},
		Start:           kafka.StartEarliest(),
		Group:           "order-totals", // lag monitoring only
		OnDecodeError:   kafka.DeadLetter,
		DeadLetterTopic: "orders-dead",
	}, kafka.Rows())
	if err != nil {
		log.Fatal(err)
	}
	type total struct {
		User  string
		Cents int64
	}
	j := runtime.NewJob(runtime.Options{Name: "order-totals", DataDir: "./data",
		Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
	rows := runtime.FromSource(j, "orders", src.New, runtime.WithParallelism(2))
	totals := runtime.Map(rows, "to-total", func(r kafka.Row) total {
		user, _ := r.Get("user")
		amount, _ := r.Get("amount")
		name, _ := user.Str()
		cents, _ := amount.Int()
		return total{User: name, Cents: cents}
	})
	byUser := runtime.KeyBy(totals, func(t total) string { return t.User }, nil)
	sums := runtime.Reduce(byUser, "sum", func(acc, t total) total { t.Cents += acc.Cents; return t }, nil)
	runtime.SinkTo(sums, "out", operators.NewCollectSink[total]("./data/out", nil))
	fmt.Println(src) // secrets would print redacted
	if err := j.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
