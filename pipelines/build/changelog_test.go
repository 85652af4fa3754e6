package build

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// changelogJob reads a changelog of user rows {user, region, total} and
// keeps, per region, the sum of the totals of at least 50 and their count:
// the filter moves users in and out of the aggregate as their totals
// change.
const changelogJob = `
job: {name: regions, parallelism: 2}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    format: %s
    schema: {user: string, region: string, total: int64}
transforms:
  - filter: total >= 50
  - map: {cents: total * 100}
sink:
  table:
    name: region_stats
    primary_key: [region]
    buckets: 4
    columns:
      cents: {agg: sum}
      users: {agg: count}
checkpoint: {interval: 50ms}
`

type userRow struct {
	Region string `json:"region"`
	Total  int64  `json:"total"`
}

type regionStat struct{ cents, users int64 }

// changelogRecords makes n seeded changes of users u0..u19 (new rows,
// updates that change the region, the total or nothing, deletes) in the
// given format, applying them to rows (the upstream table).
func changelogRecords(rng *rand.Rand, topic, format string, rows map[string]userRow, n int) []*kgo.Record {
	var recs []*kgo.Record
	for range n {
		user := fmt.Sprintf("u%d", rng.Intn(20))
		old, had := rows[user]
		key := fmt.Appendf(nil, `{"user":%q}`, user)
		image := func(r userRow) string {
			return fmt.Sprintf(`{"user":%q,"region":%q,"total":%d}`, user, r.Region, r.Total)
		}
		if had && rng.Intn(6) == 0 { // delete
			delete(rows, user)
			if format == "upsert-json" {
				recs = append(recs, &kgo.Record{Topic: topic, Key: key})
			} else {
				recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: fmt.Appendf(nil, `{"before":%s,"after":null,"op":"d"}`, image(old))},
					&kgo.Record{Topic: topic, Key: key}) // the tombstone after a delete
			}
			continue
		}
		row := old
		switch rng.Intn(3) {
		case 0:
			row.Region = []string{"eu", "us", "asia"}[rng.Intn(3)]
		case 1:
			row.Total = int64(rng.Intn(100))
		}
		if !had {
			row = userRow{Region: []string{"eu", "us", "asia"}[rng.Intn(3)], Total: int64(rng.Intn(100))}
		}
		rows[user] = row
		switch {
		case format == "upsert-json":
			recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: []byte(image(row))})
		case had:
			recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: fmt.Appendf(nil, `{"before":%s,"after":%s,"op":"u"}`, image(old), image(row))})
		default:
			recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: fmt.Appendf(nil, `{"schema":{},"payload":{"before":null,"after":%s,"op":"c"}}`, image(row))})
		}
	}
	return recs
}

// regionOracle aggregates the upstream table as the job must: the rows
// with total >= 50, per region. A region left with none is {0, 0} in the
// table (its values were retracted, not deleted), so it is compared as
// such when the table has it.
func regionOracle(rows map[string]userRow) map[string]regionStat {
	want := map[string]regionStat{}
	for _, r := range rows {
		if r.Total >= 50 {
			s := want[r.Region]
			s.cents += r.Total * 100
			s.users++
			want[r.Region] = s
		}
	}
	return want
}

func scanStats(t *testing.T, tab *aggmerge.Table) map[string]regionStat {
	t.Helper()
	got := map[string]regionStat{}
	err := tab.Scan(func(r aggmerge.Row) error {
		s := regionStat{r.Values[0].Int(), r.Values[1].Int()}
		if s != (regionStat{}) {
			got[r.Key[0].Str()] = s
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestChangelogSource feeds a job with a changelog in each format, stops
// it half-way and restores it (the normalizer's memory of every key's last
// row comes back from the checkpoint), and checks that the table is the
// exact aggregate of the upstream table after each half: updates, moves
// between regions, moves across the filter and deletes all retract.
func TestChangelogSource(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, format := range []string{"upsert-json", "debezium-json"} {
		t.Run(format, func(t *testing.T) {
			topic := kafkatest.NewTopic(t, brokers, 2)
			p := load(t, fmt.Sprintf(changelogJob, strings.Join(brokers, ","), topic, format))
			dir := t.TempDir()
			rng := rand.New(rand.NewSource(3))
			upstream := map[string]userRow{}
			for half := range 2 {
				kafkatest.Produce(t, brokers, changelogRecords(rng, topic, format, upstream, 400)...)
				want := regionOracle(upstream)
				e := newEnv(t, dir, p)
				j, err := e.Build(p, runtime.RestoreLatest)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- j.Run(context.Background()) }()
				tab, _ := e.Table("region_stats")
				deadline := time.Now().Add(30 * time.Second)
				for got := scanStats(t, tab); !maps.Equal(got, want) && time.Now().Before(deadline); got = scanStats(t, tab) {
					time.Sleep(20 * time.Millisecond)
				}
				j.Stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if got := scanStats(t, tab); !maps.Equal(got, want) {
					t.Fatalf("half %d: table\n got %v\nwant %v (upstream %s)", half, got, want, jsonOf(upstream))
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
