package export

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestReadSharedTwoOwners: two tables (two instances of a scaled job, each
// its own table id) hold the same rows in every bucket, and each one's
// exporter exports only the buckets it owns (Config.Buckets) to one
// changelog topic, with its own transactional id and versions topic. Every
// partition holds only its owner's records, neither exporter refuses the
// other's partitions, and ReadShared, joining the owners' newest versions,
// gives the whole table. Before both owners published a version it is
// ErrNoVersion, naming the one missing.
func TestReadSharedTwoOwners(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.TopicName(t, brokers)
	owned := [][]int{{0, 2}, {1, 3}}
	var owners []Owner
	var tables []*aggmerge.Table
	var xs []*Exporter
	for i, buckets := range owned {
		dir := t.TempDir()
		tbl, err := aggmerge.Open(filepath.Join(dir, "table"), crashSchema(), aggmerge.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tbl.Close() })
		name := "instance " + strconv.Itoa(i)
		versions := changelogfmt.VersionsTopic(topic) + "." + strconv.Itoa(i)
		cfg := Config{Table: tbl, Name: "totals", Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, CheckpointInterval: 50 * time.Millisecond,
			Writers: []string{"v/table#0"}, Buckets: buckets, TransactionalID: "shared-" + topic + "-" + strconv.Itoa(i), VersionsTopic: versions}
		x, stop := startExporter(t, cfg)
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
		owners = append(owners, Owner{Name: name, VersionsTopic: versions, Partitions: buckets})
		tables, xs = append(tables, tbl), append(xs, x)
		if i == 0 {
			ck := versionJob{name: "v", count: 3000}.run(t, tbl, dir, nil)
			waitVersion(t, x, map[string]uint64{"v": ck})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := ReadShared(ctx, SharedConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Owners: owners[:1]})
			cancel()
			if err == nil {
				t.Fatal("ReadShared with one owner of two of the four partitions: no error")
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = ReadShared(ctx, SharedConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Owners: owners})
		cancel()
		if !errors.Is(err, ErrNoVersion) {
			t.Fatalf("ReadShared before instance 1 published a version: %v, want ErrNoVersion", err)
		}
		ck := versionJob{name: "v", count: 3000}.run(t, tbl, dir, nil)
		waitVersion(t, x, map[string]uint64{"v": ck})
	}
	for _, r := range kafkatest.ConsumeStable(t, brokers, topic) {
		want := tables[0].ID().String()
		if r.Partition%2 == 1 {
			want = tables[1].ID().String()
		}
		if got := string(header(r, HeaderTableID)); got != want {
			t.Fatalf("partition %d holds a record of table %s, want only its owner's %s", r.Partition, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := ReadShared(ctx, SharedConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Owners: owners})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, r := range s.Rows {
		got[k] = r.String()
	}
	sameMaps(t, got, tableJSON(t, tables[0]))
	sameMaps(t, tableJSON(t, tables[1]), tableJSON(t, tables[0]))
	for i, v := range s.Versions {
		if last, _ := xs[i].LastVersion(); v.Version != last.Version {
			t.Fatalf("owner %d: version %d read, %d published last", i, v.Version, last.Version)
		}
	}
}
