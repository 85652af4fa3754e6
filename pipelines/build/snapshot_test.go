package build

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// snapshotAggregate is B's rows as the aggregate of A's rows: region → (total,
// users).
func snapshotAggregate(t *testing.T, a map[string]kafka.Row) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, r := range a {
		region, total := rowString(t, r, "region"), rowInt(t, r, "total")
		s := out[region]
		out[region] = [2]int64{s[0] + total, s[1] + 1}
	}
	return out
}

// snapshotRegions is B's rows: region → (total, users).
func snapshotRegions(t *testing.T, b map[string]kafka.Row) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, r := range b {
		out[rowString(t, r, "region")] = [2]int64{rowInt(t, r, "total"), rowInt(t, r, "users")}
	}
	return out
}

func rowString(t *testing.T, r kafka.Row, col string) string {
	t.Helper()
	v, _ := r.Get(col)
	s, ok := v.Str()
	if !ok {
		t.Fatalf("row %s: %s is not a string", r, col)
	}
	return s
}

func rowInt(t *testing.T, r kafka.Row, col string) int64 {
	t.Helper()
	v, _ := r.Get(col)
	n, ok := v.Int()
	if !ok {
		t.Fatalf("row %s: %s is not an integer", r, col)
	}
	return n
}

// tableRows returns the rows of ts as a map (nil, with an error reported,
// when they cannot be read).
func tableRows(t testing.TB, ts export.TableSnapshot) map[string]kafka.Row {
	t.Helper()
	m, err := ts.Rows.Map()
	if err != nil {
		t.Errorf("%s at version %d: %v", ts.Topic, ts.Version.Version, err)
	}
	return m
}

func sameSnapshotRows(a, b map[string]kafka.Row) bool {
	return maps.EqualFunc(a, b, func(x, y kafka.Row) bool { return x.String() == y.String() })
}

// TestSnapshotChain runs A → B (one runner, kfake or the real Kafka of
// EBBFLOW_KAFKA_BROKERS) fed in bursts, while a reader takes consistent
// snapshots of both from Kafka without pause. Every snapshot holds B's
// rows equal to the aggregate of A's rows at the paired version, and
// neither version ever goes back. After each burst, once B has read all
// of it, the snapshot reaches A's rows equal to the plain model of the
// input, and the hosting runner's snapshot (from the tables and their
// logs) equals the changelogs read up to the same versions.
func TestSnapshotChain(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopic(t, brokers, 2)
	aTopic, bTopic := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	ps, err := pipelines.Load([]pipelines.File{{Name: "chain.yaml",
		Data: fmt.Appendf(nil, chainJobs, strings.Join(brokers, ","), in, aTopic, bTopic)}}, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEnv(Options{DataDir: t.TempDir(), Logger: testLogger()})
	if err := e.OpenTables(ps); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs, dones, exported := startJobs(t, ctx, e, ps)
	conn := kafka.Connection{Brokers: brokers}
	cfg := export.SnapshotConfig{Kafka: conn, Topics: []string{aTopic, bTopic}}

	// check checks one consistent snapshot: B is the aggregate of A.
	check := func(s *export.Snapshot) {
		t.Helper()
		if !s.Consistent || len(s.Tables) != 2 {
			t.Errorf("snapshot %+v: not a consistent one of two tables", s)
			return
		}
		a, b := s.Tables[0], s.Tables[1]
		if u := b.Version.Upstream; len(u) != 1 || u[0].Topic != aTopic || !u[0].Exact {
			t.Errorf("B's version %d paired with A's %d names upstream %+v", b.Version.Version, a.Version.Version, u)
		}
		if got, want := snapshotRegions(t, tableRows(t, b)), snapshotAggregate(t, tableRows(t, a)); !maps.Equal(got, want) {
			t.Errorf("B at version %d: %v; the aggregate of A at version %d: %v", b.Version.Version, got, a.Version.Version, want)
		}
	}

	// hosted checks the hosting runner's snapshot (from the tables and
	// their logs) against the changelogs read up to the versions it chose;
	// it returns how many tables were read locally.
	hosted := func() int {
		t.Helper()
		hs, err := e.Snapshot(ctx, []string{"user_totals", "region_totals"}, false)
		if errors.Is(err, export.ErrInconsistent) || (err != nil && strings.Contains(err.Error(), "no versions yet")) {
			return 0
		}
		if err != nil {
			t.Error(err)
			return 0
		}
		check(hs)
		local := 0
		for _, ts := range hs.Tables {
			if ts.Local {
				local++
			}
			rows, err := export.ReadTable(ctx, export.ReaderConfig{Kafka: conn, Topic: ts.Topic, Until: ts.Version.EndOffsets})
			if err != nil {
				t.Error(err)
				return 0
			}
			if got := tableRows(t, ts); !sameSnapshotRows(rows, got) || ts.Rows.Len() != len(got) {
				t.Errorf("%s at version %d: the runner's snapshot (local %v) has %d rows (Len %d), the changelog %d: %v vs %v",
					ts.Topic, ts.Version.Version, ts.Local, len(got), ts.Rows.Len(), len(rows), got, rows)
			}
		}
		return local
	}

	// The reader: snapshots without pause until stopped, from Kafka and
	// from the hosting runner in turn.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var taken, inconsistent, local int
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last [2]uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := export.ReadSnapshot(ctx, cfg)
			switch {
			case errors.Is(err, export.ErrInconsistent) && taken == 0,
				err != nil && strings.Contains(err.Error(), "no versions yet"):
				inconsistent++
				continue
			case err != nil:
				t.Errorf("snapshot %d: %v", taken, err)
				return
			}
			check(s)
			for i, ts := range s.Tables {
				if ts.Version.Version < last[i] {
					t.Errorf("snapshot %d: %s at version %d after %d", taken, ts.Topic, ts.Version.Version, last[i])
				}
				last[i] = ts.Version.Version
			}
			taken++
			local += hosted()
		}
	}()

	regions := []string{"eu", "us", "asia"}
	model := map[string]int64{} // user → total
	for burst := range 6 {
		var recs []*kgo.Record
		for i := range 40 {
			u := (burst*7 + i*13) % 50
			amount := int64(i%9 + 1)
			model[fmt.Sprintf("u%d", u)] += amount
			recs = append(recs, &kgo.Record{Topic: in, Value: fmt.Appendf(nil, `{"user":"u%d","region":%q,"amount":%d}`, u, regions[u%3], amount)})
		}
		kafkatest.Produce(t, brokers, recs...)
		// Await the consistent snapshot that holds the whole burst.
		deadline := time.Now().Add(60 * time.Second)
		for {
			s, err := export.ReadSnapshot(ctx, cfg)
			if err == nil {
				check(s)
				got := map[string]int64{}
				for _, r := range tableRows(t, s.Tables[0]) {
					got[rowString(t, r, "user")] = rowInt(t, r, "total")
				}
				if maps.Equal(got, model) {
					break
				}
			} else if !errors.Is(err, export.ErrInconsistent) && !strings.Contains(err.Error(), "no versions yet") {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: no consistent snapshot holds the input after 60 s (last: %v)", burst, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A weak read says so.
	ws, err := export.ReadSnapshot(ctx, export.SnapshotConfig{Kafka: conn, Topics: cfg.Topics, Weak: true})
	if err != nil || ws.Consistent {
		t.Fatalf("weak snapshot: %+v, %v; want one not marked consistent", ws, err)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d consistent snapshots taken while the jobs ran (%d found none yet); %d of %d tables of the runner's snapshots read from its tables",
		taken, inconsistent, local, 2*taken)
	if taken < 3 || local == 0 {
		t.Fatalf("%d snapshots, %d tables read locally: the test lost its teeth", taken, local)
	}
	for _, j := range jobs {
		j.Stop()
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !e.ExportsCaughtUp(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exports do not catch up")
		}
	}
	cancel()
	if err := <-exported; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// Once A's log is truncated to its end, reading a version from before
	// the last burst from the table is a clear error (the runner's
	// snapshot then reads it from the changelog).
	vs, err := export.ReadVersions(context.Background(), conn, aTopic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := e.Table("user_totals")
	for b, end := range a.LogEnds() {
		if err := a.Truncate(b, end); err != nil {
			t.Fatal(err)
		}
	}
	x := e.exporters[slices.IndexFunc(e.exporters, func(ce changelogExport) bool { return ce.name == "user_totals" })].x
	// The newest version before the last burst's data that the exporter
	// still keeps (it keeps the newest 100).
	last := vs[len(vs)-1]
	for i := len(vs) - 1; ; i-- {
		if i < 0 {
			t.Fatal("the exporter keeps no version of A older than the last burst")
		}
		if slices.Equal(vs[i].EndOffsets, last.EndOffsets) {
			continue
		}
		_, ok, err := x.RowsAt(&vs[i])
		if !ok && err == nil {
			continue // not kept: older than the newest 100
		}
		if !errors.Is(err, export.ErrPastRetention) || !strings.Contains(err.Error(), "below log start") {
			t.Fatalf("A's version %d read from its truncated table: %v; want ErrPastRetention", vs[i].Version, err)
		}
		break
	}
}
