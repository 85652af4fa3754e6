package export

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestKcatReadsUpsertJSON has an independent client, kcat (librdkafka),
// read the changelog read_committed and rebuild the table from the
// upsert-json records: keys, rows, tombstones and the offset header.
func TestKcatReadsUpsertJSON(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not on PATH (apt-get install -y kcat; CI installs it): the independent-client check did not run")
	}
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	w := newMultiWriter(t, tbl, 3)
	x, stop := startExporter(t, Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Config{Brokers: brokers}})
	for i := range 30 {
		w.batch(10)
		if i%4 == 3 {
			w.checkpoint()
		}
	}
	w.checkpoint()
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One line per record: partition, value size (-1: tombstone), headers,
	// key, value; \x1f never occurs in JSON.
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(brokers, ","), "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%p\x1f%S\x1f%h\x1f%k\x1f%s\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	rows := map[string]string{}
	last := map[string]int64{}
	n := 0
	for line := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.Split(line, "\x1f")
		if len(f) != 5 {
			t.Fatalf("kcat line %q: %d fields", line, len(f))
		}
		part, size, headers, key, value := f[0], f[1], f[2], f[3], f[4]
		off := int64(-1)
		for h := range strings.SplitSeq(headers, ",") {
			if v, ok := strings.CutPrefix(h, HeaderOffset+"="); ok {
				off, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if prev, ok := last[part]; off < 0 || ok && off <= prev {
			t.Fatalf("partition %s: log offset header %d after %d (headers %q)", part, off, last[part], headers)
		}
		last[part] = off
		if size == "-1" {
			delete(rows, key)
		} else {
			rows[key] = value
		}
		n++
	}
	t.Logf("kcat read %d records", n)
	sameMaps(t, rows, tableJSON(t, tbl))
}
