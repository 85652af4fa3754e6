package main

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// TestAbuseScaleTwoRunners runs the orders job in scale mode in two runner
// processes (docs/SCALING.md), each with its own data directory and
// --set job.scale.instance, on one Kafka cluster. Orders arrive before
// and while both run. Each runner's table holds only the buckets it owns,
// so no user is in both; together they equal the exact totals, last_value
// columns included (a user's orders keep their order through the
// repartition topic); and both took part.
func TestAbuseScaleTwoRunners(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	repartition := kafkatest.TopicName(t, brokers)
	feed := &orderFeed{t: t, brokers: brokers, topic: topic, rng: rand.New(rand.NewSource(seed)), want: map[string]*userTotal{}}
	feed.produce(500)

	dirs := []string{t.TempDir(), t.TempDir()}
	var runners []*child
	for i, dir := range dirs {
		runners = append(runners, start(t, nil, "run", "-f", "testdata/orders.yaml", "--data-dir", dir,
			"--http-address", "127.0.0.1:0", "--summary", "0",
			"--set", "source.kafka.brokers=["+strings.Join(brokers, ",")+"]", "--set", "source.kafka.topics=["+topic+"]",
			"--set", fmt.Sprintf("job.scale={mode: kafka, instances: 2, instance: %d, repartition_topic: %s}", i, repartition)))
	}
	kafkatest.WaitGroupShared(t, brokers, "orders.scale", 2)
	for range 5 {
		feed.produce(100 + feed.rng.Intn(200))
	}

	union := func() (map[string]map[string]any, []int, string) {
		all := map[string]map[string]any{}
		var sizes []int
		var dup []string
		for _, dir := range dirs {
			rows := scanJSON(t, dir, "totals", "user")
			sizes = append(sizes, len(rows))
			for u, r := range rows {
				if _, ok := all[u]; ok {
					dup = append(dup, u)
				}
				all[u] = r
			}
		}
		if len(dup) > 0 {
			return all, sizes, fmt.Sprintf("users in both tables: %v", dup)
		}
		return all, sizes, ""
	}
	diff := "not started"
	for i, c := range runners {
		waitFor(t, c, 60*time.Second, "the exact totals over both runners (seed "+strconv.FormatInt(seed, 10)+")", func() bool {
			if liveRunner(dirs[i]) == "" {
				return false
			}
			got, _, d := union()
			if d == "" {
				d = equalTotals(got, feed.want)
			}
			diff = d
			return diff == ""
		})
	}
	for _, c := range runners {
		stopGracefully(t, c)
	}
	got, sizes, d := union()
	if d == "" {
		d = equalTotals(got, feed.want)
	}
	if d != "" {
		t.Fatalf("seed %d: after the stop: %s", seed, d)
	}
	t.Logf("seed %d: %d orders, %d users: instance 0 holds %d, instance 1 holds %d", seed, feed.seq, len(got), sizes[0], sizes[1])
	if sizes[0] == 0 || sizes[1] == 0 {
		t.Fatalf("a runner holds no rows: %v", sizes)
	}
}

// TestAbuseScaleBadRecord: a record that stage 1 of a scaled job cannot
// decode ends the runner with exit 1 and a message naming the record
// (on_error: fail), and its group offsets do not pass it: nothing after
// the last commit is lost.
func TestAbuseScaleBadRecord(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	kafkatest.Produce(t, brokers, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(`{"seq": 1, "user": "u1", "amount": 5, "status": "PAID"}`)},
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte(`not json`)})
	c := start(t, nil, "run", "-f", "testdata/orders.yaml", "--data-dir", t.TempDir(),
		"--http-address", "127.0.0.1:0", "--summary", "0",
		"--set", "source.kafka.brokers=["+strings.Join(brokers, ",")+"]", "--set", "source.kafka.topics=["+topic+"]",
		"--set", "job.scale={mode: kafka, instances: 1, repartition_topic: "+kafkatest.TopicName(t, brokers)+"}")
	if code := c.exitCode(t, 60*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; log:\n%s", code, c.stderr.String())
	}
	if want := topic + "/0@1"; !strings.Contains(c.stderr.String(), want) {
		t.Fatalf("the error does not name the record %s:\n%s", want, c.stderr.String())
	}
	offsets, err := kafkatest.Admin(t, brokers).FetchOffsets(t.Context(), "orders.scale")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offsets.Lookup(topic, 0); ok && o.At > 1 {
		t.Fatalf("the group's offset passed the bad record: %d", o.At)
	}
}
