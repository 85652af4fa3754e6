package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// mapCols maps a sequence event to the crash schema's columns cols.
func mapCols(cols []string) writer.Mapper[operators.Event] {
	return func(e operators.Event, r *writer.Row) error {
		r.Kind = runtime.RowInsert
		r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%crashKeys)))
		r.Vals = r.Vals[:0]
		for _, c := range cols {
			switch c {
			case "total", "top":
				r.Vals = append(r.Vals, agg.IntValue(e.Value))
			case "n":
				r.Vals = append(r.Vals, agg.IntValue(1))
			case "last":
				r.Vals = append(r.Vals, agg.IntValue(int64(e.Seq)))
			}
		}
		return nil
	}
}

// versionJob is a job writing columns of the crash schema's table from a
// rate-limited sequence.
type versionJob struct {
	name    string
	cols    []string // nil: every column
	count   uint64
	restore runtime.RestorePoint
}

// run runs the job until its sequence ends, or until stop says so (then
// it stops with a final checkpoint), and returns the checkpoint its
// writer committed last.
func (v versionJob) run(t *testing.T, tbl *aggmerge.Table, dir string, stop func() bool) uint64 {
	t.Helper()
	ck, err := v.runErr(tbl, dir, stop)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// runErr is run for a goroutine of its own.
func (v versionJob) runErr(tbl *aggmerge.Table, dir string, stop func() bool) (uint64, error) {
	j := runtime.NewJob(runtime.Options{Name: v.name, DataDir: dir, Restore: v.restore,
		Checkpoint: runtime.CheckpointOptions{Interval: 50 * time.Millisecond, Retain: 20}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: v.count, Rate: 3_000}))
	cols := v.cols
	if cols == nil {
		cols = []string{"total", "n", "top", "last"}
	}
	if err := writer.To(src, "table", writer.Config{Table: tbl, Columns: v.cols, BatchSize: 100, FlushInterval: 10 * time.Millisecond}, mapCols(cols)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if stop == nil {
			return
		}
		for !stop() {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		j.Stop()
	}()
	err := j.Run(ctx)
	close(done)
	<-stopped
	if err != nil {
		return 0, fmt.Errorf("job %s: %w", v.name, err)
	}
	for _, r := range tbl.Writers() {
		if r.Job == v.name {
			return r.Checkpoint, nil
		}
	}
	return 0, fmt.Errorf("job %s is not registered", v.name)
}

// waitVersion waits until the exporter has published a version in which
// every job named in want is at its checkpoint.
func waitVersion(t *testing.T, x *Exporter, want map[string]uint64) Version {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := x.LastVersion()
		if ok {
			got := map[string]uint64{}
			for _, w := range v.Writers {
				got[w.Job] = w.Checkpoint
			}
			match := true
			for job, ck := range want {
				match = match && got[job] == ck
			}
			if match {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no version with writers at %v after 30s; last %+v", want, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replay applies the upsert-json records below ends (per partition): the
// table as of those end offsets, record key → value.
func replay(recs []*kgo.Record, ends []int64) map[string]string {
	rows := map[string]string{}
	for _, r := range recs {
		if int(r.Partition) >= len(ends) || r.Offset >= ends[r.Partition] {
			continue
		}
		if r.Value == nil {
			delete(rows, string(r.Key))
		} else {
			rows[string(r.Key)] = string(r.Value)
		}
	}
	return rows
}

// checkVersions checks the versions of a changelog against its committed
// records: numbers grow by one, end offsets never go back and each lies
// just past a committed record (or is unchanged), and the last version
// ends where the changelog does.
func checkVersions(t *testing.T, vs []Version, recs []*kgo.Record, buckets int) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatal("no versions")
	}
	at := map[int32]map[int64]bool{}
	last := make([]int64, buckets)
	for _, r := range recs {
		if at[r.Partition] == nil {
			at[r.Partition] = map[int64]bool{}
		}
		at[r.Partition][r.Offset] = true
		last[r.Partition] = max(last[r.Partition], r.Offset+1)
	}
	prev := make([]int64, buckets)
	for i, v := range vs {
		if i > 0 && v.Version != vs[i-1].Version+1 {
			t.Fatalf("version %d follows version %d", v.Version, vs[i-1].Version)
		}
		if len(v.EndOffsets) != buckets {
			t.Fatalf("version %d has %d end offsets, want %d", v.Version, len(v.EndOffsets), buckets)
		}
		for p, end := range v.EndOffsets {
			switch {
			case end < prev[p]:
				t.Fatalf("version %d partition %d ends at %d, before the previous version's %d", v.Version, p, end, prev[p])
			case end > last[p]:
				t.Fatalf("version %d partition %d ends at %d, past the committed changelog (%d)", v.Version, p, end, last[p])
			case end != prev[p] && !at[int32(p)][end-1]:
				t.Fatalf("version %d partition %d ends at %d: no committed record at %d", v.Version, p, end, end-1)
			}
		}
		prev = v.EndOffsets
	}
	if !slices.Equal(prev, last) {
		t.Fatalf("the last version (%d) ends at %v, the changelog at %v", vs[len(vs)-1].Version, prev, last)
	}
}

// checkCut checks that rows (crash schema, upsert-json) are a checkpoint
// cut of the sequence for the columns cols: per sequence split, the
// counts of its keys are those after one number of its events, and every
// row holds exactly the values after its key's count.
func checkCut(t *testing.T, what string, rows map[string]string, cols []string) {
	t.Helper()
	const splits = 8
	counts := make([]int64, crashKeys)
	for k, v := range rows {
		key := keyOf(t, k)
		var row map[string]*int64
		if err := json.Unmarshal([]byte(v), &row); err != nil {
			t.Fatalf("%s: row %s: %v", what, v, err)
		}
		var n int64
		if slices.Contains(cols, "n") {
			n = *row["n"]
		} else {
			n = (*row["last"]-key)/crashKeys + 1
		}
		var want map[string]*int64
		if err := json.Unmarshal([]byte(expectedRow(key, int(n))), &want); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			if row[c] == nil || *row[c] != *want[c] {
				t.Fatalf("%s: key %d: column %s of %s, want it as in %s", what, key, c, v, expectedRow(key, int(n)))
			}
		}
		counts[key] = n
	}
	for s := range int64(splits) {
		var total int64
		for i := range int64(crashKeys / splits) {
			total += counts[s+splits*i]
		}
		for i := range int64(crashKeys / splits) {
			if want := max(0, (total-i+splits-1)/splits); counts[s+splits*i] != want {
				t.Fatalf("%s: split %d: key %d has %d events, a cut after %d events of the split gives %d (counts %v)",
					what, s, s+splits*i, counts[s+splits*i], total, want, counts)
			}
		}
	}
}

// checkWriterCuts checks, from the table's log, that version v holds
// exactly its writers' checkpoints: in every partition, each exported
// change of a writer group lies before v's end offset if the group's
// commit markers up to v's checkpoint cover it, after it if not. The log
// is read up to its first rollback marker: v must come before any undo
// (after a restore of an older checkpoint, checkpoint ids are reused).
func checkWriterCuts(t *testing.T, tbl *aggmerge.Table, recs []*kgo.Record, v Version) {
	t.Helper()
	for b := range tbl.Schema().Buckets {
		writerOf := map[uint64]string{} // log offset → writer group
		covered := map[string]uint64{}  // writer group → end of its markers up to its checkpoint
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Op == aggmerge.MarkerEntry && e.Marker.Kind == aggmerge.MarkerRollback {
				return errStop
			}
			g := group(e.Writer.ID)
			writerOf[e.Offset] = g
			if e.Op == aggmerge.MarkerEntry && e.Marker.Kind == aggmerge.MarkerCommit {
				for _, w := range v.Writers {
					if w.Writer == g && e.Marker.Checkpoint <= w.Checkpoint {
						covered[g] = max(covered[g], e.Marker.To)
					}
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			t.Fatal(err)
		}
		for _, r := range recs {
			if int(r.Partition) != b {
				continue
			}
			lo, _ := uintHeader(r, HeaderOffset)
			g, ok := writerOf[lo]
			if !ok {
				continue // after the first rollback
			}
			if _, ok := covered[g]; !ok && !slices.ContainsFunc(v.Writers, func(w changelogfmt.WriterCheckpoint) bool { return w.Writer == g }) {
				continue
			}
			if in := r.Offset < v.EndOffsets[b]; in != (lo < covered[g]) {
				t.Fatalf("version %d (%+v): partition %d record %d (log offset %d, writer %s) is inside the version: %v, but the writer's markers up to its checkpoint end at %d",
					v.Version, v.Writers, b, r.Offset, lo, g, in, covered[g])
			}
		}
	}
}

// retained lists the retained checkpoints of job under dir.
func retained(t *testing.T, dir, job string) []uint64 {
	t.Helper()
	s, err := state.OpenStorage(filepath.Join(dir, "jobs", job, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, c := range cps {
		ids = append(ids, uint64(c.ID))
	}
	return ids
}

// TestVersionsFollowCheckpoints runs a job writing a table with its
// exporter three times: stopped half way, resumed to its end, then
// restored to an older checkpoint. The versions must grow by one across
// the restarts, each must be exactly a checkpoint cut of the input when the
// changelog is read up to its end offsets, the last must end where the
// changelog ends, and the restore of the older checkpoint must be a new
// version whose content is that of the older one. A reader that joins
// late reads them all; the data dir keeps the newest; the versions topic
// is compacted, with one partition.
func TestVersionsFollowCheckpoints(t *testing.T) {
	brokers, dir, tbl, cfg := versionsSetup(t, "v/table#0")
	topic := cfg.Topic
	cfg.VersionsFile, cfg.Logger = filepath.Join(dir, "versions.json"), slog.New(slog.NewTextHandler(testWriter{t}, nil))
	run := func(job versionJob, stop func(*Exporter) bool) Version {
		x, stopX := startExporter(t, cfg)
		defer func() {
			if err := stopX(); err != nil {
				t.Fatal(err)
			}
		}()
		ck := job.run(t, tbl, dir, func() bool { return stop != nil && stop(x) })
		return waitVersion(t, x, map[string]uint64{"v": ck})
	}
	half := run(versionJob{name: "v", count: 6000}, func(x *Exporter) bool { v, _ := x.LastVersion(); return v.Version >= 4 })
	full := run(versionJob{name: "v", count: 6000}, nil)
	if full.Version <= half.Version {
		t.Fatalf("version %d after the restart, %d before it", full.Version, half.Version)
	}
	vs, err := ReadVersions(context.Background(), cfg.Kafka, topic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	// The older checkpoint: the oldest retained one that a version names.
	ids := retained(t, dir, "v")
	var old *Version
	for i := range vs {
		if ck := vs[i].Writers[0].Checkpoint; ck < full.Writers[0].Checkpoint && slices.Contains(ids, ck) {
			old = &vs[i]
			break
		}
	}
	if old == nil {
		t.Fatalf("no version names a retained checkpoint older than %d (retained %v)", full.Writers[0].Checkpoint, ids)
	}
	// Restoring it with a sequence already past its count replays
	// nothing: the job undoes and ends.
	back := run(versionJob{name: "v", count: 1, restore: runtime.RestoreCheckpoint(barrier.CheckpointID(old.Writers[0].Checkpoint))}, nil)
	if back.Version <= full.Version {
		t.Fatalf("version %d after restoring checkpoint %d, %d before", back.Version, old.Writers[0].Checkpoint, full.Version)
	}
	recs := kafkatest.ConsumeStable(t, brokers, topic)
	vs, err = ReadVersions(context.Background(), cfg.Kafka, topic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d versions, %d records; version %d restored checkpoint %d of version %d", len(vs), len(recs), back.Version, old.Writers[0].Checkpoint, old.Version)
	checkVersions(t, vs, recs, testBuckets)
	if vs[0].Version != 1 || vs[len(vs)-1].Version != back.Version {
		t.Fatalf("versions %d..%d, want 1..%d", vs[0].Version, vs[len(vs)-1].Version, back.Version)
	}
	for _, v := range vs {
		checkCut(t, fmt.Sprintf("version %d", v.Version), replay(recs, v.EndOffsets), []string{"total", "n", "top", "last"})
		if v.Version <= full.Version {
			checkWriterCuts(t, tbl, recs, v)
		}
	}
	sameMaps(t, replay(recs, back.EndOffsets), replay(recs, old.EndOffsets))
	sameMaps(t, replay(recs, back.EndOffsets), tableJSON(t, tbl))

	kept, err := ReadVersionsFile(cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) == 0 || kept[len(kept)-1].Version != back.Version || !kept[len(kept)-1].SameContent(&back) {
		t.Fatalf("the data dir keeps %d versions, the last %+v; want %+v", len(kept), kept[len(kept)-1], back)
	}

	adm := kafkatest.Admin(t, brokers)
	ctx := context.Background()
	details, err := adm.ListTopics(ctx, topic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(details[topic+".versions"].Partitions); n != 1 {
		t.Fatalf("versions topic has %d partitions, want 1", n)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic+".versions", nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("versions topic cleanup.policy %q, want compact", policy)
	}
	// A reader that joins now reads the whole history; keys cycle through
	// the version number mod VersionsHistory.
	raw := kafkatest.ConsumeStable(t, brokers, topic+".versions")
	if len(raw) != len(vs) {
		t.Fatalf("%d version records, ReadVersions gave %d", len(raw), len(vs))
	}
	for i, r := range raw {
		if want := fmt.Sprint(vs[i].Version % 1000); string(r.Key) != want {
			t.Fatalf("version %d has key %s, want %s", vs[i].Version, r.Key, want)
		}
	}
}

// TestVersionsTwoWriters: two jobs write disjoint columns of one table,
// both at once, then each alone (the other's input is done). Every version
// names both with their checkpoints and is, for each job's columns, a
// checkpoint cut of that job's input; while one job is idle, versions
// follow the other's checkpoints.
func TestVersionsTwoWriters(t *testing.T) {
	brokers, dir, tbl, cfg := versionsSetup(t, "a/table#0", "b/table#0")
	topic := cfg.Topic
	x, stopX := startExporter(t, cfg)
	a := versionJob{name: "a", cols: []string{"total", "n"}}
	b := versionJob{name: "b", cols: []string{"top", "last"}}
	cks := map[string]uint64{}
	phase := func(jobs ...versionJob) {
		errs := make(chan error, len(jobs))
		got := make([]uint64, len(jobs))
		for i, j := range jobs {
			go func() {
				var err error
				got[i], err = j.runErr(tbl, filepath.Join(dir, j.name), nil)
				errs <- err
			}()
		}
		for range jobs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for i, j := range jobs {
			cks[j.name] = got[i]
		}
		waitVersion(t, x, cks)
	}
	a.count, b.count = 3000, 3000
	phase(a, b)
	a.count = 6000
	phase(a)
	b.count = 6000
	phase(b)
	last := waitVersion(t, x, cks)
	if err := stopX(); err != nil {
		t.Fatal(err)
	}
	recs := kafkatest.ConsumeStable(t, brokers, topic)
	vs, err := ReadVersions(context.Background(), cfg.Kafka, topic+".versions")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d versions, %d records", len(vs), len(recs))
	checkVersions(t, vs, recs, testBuckets)
	if vs[len(vs)-1].Version != last.Version {
		t.Fatalf("last version %d, the exporter says %d", vs[len(vs)-1].Version, last.Version)
	}
	moved := map[string]int{} // versions in which a job's checkpoint moved and the other's did not
	for i, v := range vs {
		if len(v.Writers) != 2 || v.Writers[0].Writer != "a/table" || v.Writers[1].Writer != "b/table" {
			t.Fatalf("version %d names writers %+v, want a/table and b/table", v.Version, v.Writers)
		}
		if i > 0 {
			p := vs[i-1].Writers
			switch {
			case p[0].Checkpoint != v.Writers[0].Checkpoint && p[1].Checkpoint == v.Writers[1].Checkpoint:
				moved["a"]++
			case p[0].Checkpoint == v.Writers[0].Checkpoint && p[1].Checkpoint != v.Writers[1].Checkpoint:
				moved["b"]++
			}
		}
		checkWriterCuts(t, tbl, recs, v)
		rows := replay(recs, v.EndOffsets)
		for i, j := range []versionJob{a, b} {
			only := map[string]string{}
			for k, row := range rows {
				var m map[string]any
				if err := json.Unmarshal([]byte(row), &m); err != nil {
					t.Fatal(err)
				}
				if m[j.cols[0]] != nil {
					only[k] = row
				}
			}
			checkCut(t, fmt.Sprintf("version %d job %s (checkpoint %d)", v.Version, j.name, v.Writers[i].Checkpoint), only, j.cols)
		}
	}
	if moved["a"] < 3 || moved["b"] < 3 {
		t.Fatalf("versions following one job while the other is idle: %v, want at least 3 each", moved)
	}
	sameMaps(t, replay(recs, last.EndOffsets), tableJSON(t, tbl))
}

// TestVersionCommitsWithItsChangelog holds the second transaction that
// carries a version open, before its commit, and reads both topics read_committed
// meanwhile: no changelog record may lie past the last committed version
// (they commit together). Then the transaction fails: its records and its
// version vanish together, and the next session publishes them again.
func TestVersionCommitsWithItsChangelog(t *testing.T) {
	brokers, dir, tbl, cfg := versionsSetup(t)
	topic := cfg.Topic
	cfg.setDefaults()
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var inFlight Version
	var before []int64    // the changelog's committed ends when it began
	calls := 0            // transactions carrying a version
	var later atomic.Bool // a version after the failures is being committed
	x.failBeforeCommit = func(v *Version) error {
		if v == nil {
			return nil
		}
		calls++
		later.Store(calls > 4)
		if calls < 2 {
			return nil
		}
		if calls == 2 {
			inFlight, before = *v, slices.Clone(x.ver.ends)
			close(held)
			<-release
		}
		if calls <= 3 {
			return errors.New("injected: the transaction fails before its commit")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	xdone := make(chan error, 1)
	go func() { xdone <- x.Run(ctx) }()
	type result struct {
		ck  uint64
		err error
	}
	jdone := make(chan result, 1)
	go func() {
		ck, err := versionJob{name: "v", count: 100_000}.runErr(tbl, dir, later.Load)
		jdone <- result{ck, err}
	}()

	select {
	case <-held:
	case res := <-jdone:
		close(release)
		t.Fatalf("the job ended (%v) before a second version was exported", res.err)
	}
	recs := kafkatest.ConsumeAll(t, brokers, topic)
	vs, err := ReadVersions(context.Background(), cfg.Kafka, cfg.VersionsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 || vs[len(vs)-1].Version+1 != inFlight.Version {
		t.Fatalf("%d versions committed, version %d in flight", len(vs), inFlight.Version)
	}
	// The records of the transaction in flight are those past the ends
	// committed before it, up to its version's end offsets: none may be
	// visible before the version is.
	own := 0
	for p, end := range inFlight.EndOffsets {
		if end > before[p] {
			own++
		}
	}
	if own == 0 {
		t.Fatalf("the transaction of version %d holds no changelog record", inFlight.Version)
	}
	for _, r := range recs {
		if r.Offset >= before[r.Partition] {
			t.Fatalf("changelog record %d/%d of the transaction of version %d (from %v to %v) is visible before its version (committed: version %d)",
				r.Partition, r.Offset, inFlight.Version, before, inFlight.EndOffsets, vs[len(vs)-1].Version)
		}
	}
	close(release)
	res := <-jdone
	if res.err != nil {
		t.Fatal(res.err)
	}
	waitVersion(t, x, map[string]uint64{"v": res.ck})
	cancel()
	if err := <-xdone; err != nil {
		t.Fatal(err)
	}
	recs = kafkatest.ConsumeStable(t, brokers, topic)
	vs, err = ReadVersions(context.Background(), cfg.Kafka, cfg.VersionsTopic)
	if err != nil {
		t.Fatal(err)
	}
	checkVersions(t, vs, recs, testBuckets)
	for _, v := range vs {
		checkCut(t, fmt.Sprintf("version %d", v.Version), replay(recs, v.EndOffsets), []string{"total", "n", "top", "last"})
	}
	sameMaps(t, replay(recs, vs[len(vs)-1].EndOffsets), tableJSON(t, tbl))
}

// versionsSetup opens a table of crashSchema in a temporary dir (closed at
// the end of the test) and returns the Config of its committed exporter to
// a fresh topic, with 50 ms checkpoints and the given writers.
func versionsSetup(t *testing.T, writers ...string) (brokers []string, dir string, tbl *aggmerge.Table, cfg Config) {
	t.Helper()
	brokers = kafkatest.Brokers(t)
	dir = t.TempDir()
	tbl, err := aggmerge.Open(filepath.Join(dir, "table"), crashSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	cfg = Config{Table: tbl, Name: "totals", Topic: kafkatest.TopicName(t, brokers), Kafka: kafka.Connection{Brokers: brokers},
		CheckpointInterval: 50 * time.Millisecond, Writers: writers}
	return brokers, dir, tbl, cfg
}
