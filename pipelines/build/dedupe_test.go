package build

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// sourceRecords is the number of records the job's sources read in this
// run.
func sourceRecords(j *Job) int64 {
	var n int64
	for _, ts := range j.Status().Tasks {
		if ts.Source {
			n += ts.RecordsIn
		}
	}
	return n
}

type order struct {
	id, user string
	at       time.Time
}

// dedupeModel counts the orders a dedupe within a minute keeps, per user
// and in all: per id, in order, an order is dropped when a kept one is
// less than a minute away.
func dedupeModel(orders []order) (map[string]int64, int) {
	kept := map[string][]time.Time{}
	per, total := map[string]int64{}, 0
	for _, o := range orders {
		dup := false
		for _, k := range kept[o.id] {
			if d := o.at.Sub(k); d < time.Minute && d > -time.Minute {
				dup = true
			}
		}
		if !dup {
			kept[o.id] = append(kept[o.id], o.at)
			per[o.user]++
			total++
		}
	}
	return per, total
}

// TestDedupeAcrossRestore: a job file with transforms: [{dedupe: {key: id,
// within: 1m}}] counts orders per user once per id. The input repeats ids
// (some within the minute, some after it; an id stays in one partition).
// Run 1 reads the first half and stops with a checkpoint; run 2 restores
// it and reads the second half, whose repeats of the first half's ids are
// dropped only if the kept ids were restored. The table equals the model.
func TestDedupeAcrossRestore(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const parts = 3
	topic := kafkatest.NewTopic(t, brokers, parts)
	rng := rand.New(rand.NewSource(7))
	base := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	var orders []order
	for i := range 400 {
		at := base.Add(time.Duration(i) * 5 * time.Second)
		id := fmt.Sprintf("o%d", i)
		switch {
		case i >= 200 && i < 210: // the first of the second half repeat the fresh ids 50 s before
			id = orders[i-10].id
		case i >= 190 && i < 200: // fresh
		case i >= 10 && rng.Intn(3) == 0: // a repeat of one of the 10 before it, 5 to 50 s earlier
			id = orders[i-1-rng.Intn(10)].id
		}
		orders = append(orders, order{id: id, user: fmt.Sprintf("u%d", len(id)%4), at: at})
	}
	want, total := dedupeModel(orders)
	if total == len(orders) {
		t.Fatal("the input has no duplicate")
	}
	_, firstHalf := dedupeModel(orders[:len(orders)/2])
	partOf := func(id string) int32 { // an id's records stay in order: one partition
		h := 0
		for _, c := range id {
			h = h*31 + int(c)
		}
		return int32(h % parts)
	}
	produce := func(os []order) {
		var recs []*kgo.Record
		for _, o := range os {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: partOf(o.id),
				Value: fmt.Appendf(nil, `{"id":%q,"user":%q,"at":%q}`, o.id, o.user, o.at.Format(time.RFC3339Nano))})
		}
		kafkatest.Produce(t, brokers, recs...)
	}
	p := load(t, fmt.Sprintf(`
job: {name: dedupe, parallelism: 2}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    schema: {id: string, user: string, at: timestamp}
    event_time: {field: at, max_out_of_orderness: 1s}
transforms:
  - dedupe: {key: id, within: 1m}
sink:
  table: {name: orders, primary_key: [user], buckets: 4, columns: {n: {agg: count}}}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	dir := t.TempDir()
	count := func(e *Env) int64 {
		tab, _ := e.Table("orders")
		var n int64
		_ = tab.Scan(func(r aggmerge.Row) error { n += r.Values[0].Int(); return nil })
		return n
	}
	half := len(orders) / 2
	for run, os := range [][]order{orders[:half], orders[half:]} {
		produce(os)
		e := openEnv(t, Options{DataDir: dir}, p)
		ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
		j, done := startJob(t, ctx, e, p)
		target := int64(firstHalf)
		if run == 1 {
			target = int64(total)
		}
		// Stop once the sources read this run's records and the table
		// counts what the model keeps: more would show in the check below.
		deadline := time.Now().Add(30 * time.Second)
		for (sourceRecords(j) < int64(len(os)) || count(e) < target) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		j.Stop()
		if err := <-done; err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		cancel()
		if n := count(e); n != target {
			e.Close()
			t.Fatalf("run %d: %d orders counted, want %d", run+1, n, target)
		}
		if run == 1 {
			tab, _ := e.Table("orders")
			got := map[string]int64{}
			_ = tab.Scan(func(r aggmerge.Row) error { got[r.Key[0].Str()] = r.Values[0].Int(); return nil })
			for u, n := range want {
				if got[u] != n {
					t.Errorf("user %s: %d orders, want %d", u, got[u], n)
				}
			}
		}
		e.Close()
	}
}
