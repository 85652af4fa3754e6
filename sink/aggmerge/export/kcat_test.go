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
// upsert-json records: keys, rows, tombstones, and per partition the
// offset headers of every change entry once, in log order.
func TestKcatReadsUpsertJSON(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not on PATH (apt-get install -y kcat; CI installs it): the independent-client check did not run")
	}
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	w := newMultiWriter(t, tbl, 3)
	x, stop := startExporter(t, Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}})
	for i := range 30 {
		w.batch(10)
		if i%4 == 3 {
			w.checkpoint()
		}
	}
	w.checkpoint()
	waitExported(t, x, tbl) // also until the last commit is visible: kcat -e stops at the last stable offsets
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
	read := map[int32][]uint64{} // per partition, the log offset headers in order
	n := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\x1f")
		if len(f) != 5 {
			t.Fatalf("kcat line %q: %d fields", line, len(f))
		}
		part, size, headers, key, value := f[0], f[1], f[2], f[3], f[4]
		p, err := strconv.ParseInt(part, 10, 32)
		if err != nil {
			t.Fatalf("kcat line %q: partition: %v", line, err)
		}
		off, ok := uint64(0), false
		for h := range strings.SplitSeq(headers, ",") {
			if v, found := strings.CutPrefix(h, HeaderOffset+"="); found {
				off, err = strconv.ParseUint(v, 10, 64)
				ok = err == nil
			}
		}
		if !ok {
			t.Fatalf("partition %d: record without a valid %s header (headers %q)", p, HeaderOffset, headers)
		}
		read[int32(p)] = append(read[int32(p)], off)
		if size == "-1" {
			delete(rows, key)
		} else {
			rows[key] = value
		}
		n++
	}
	t.Logf("kcat read %d records", n)
	// Change entries in log order, none twice (the writer committed them
	// all; a key's changes within a range come as one).
	foldedOffsets(t, read, changeOffsets(t, tbl))
	sameMaps(t, rows, tableJSON(t, tbl))
}
