package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/state"
)

// Version is a table version (see changelogfmt.Version and the package
// doc).
type Version = changelogfmt.Version

// UpstreamFunc tells what job had consumed of its inputs at its completed
// checkpoint (see Config.Upstream). ok is false while it cannot tell yet
// (the job's sources have not opened, or have not snapshotted that
// checkpoint in this process): the version waits.
type UpstreamFunc func(ctx context.Context, job string, checkpoint uint64) (in Inputs, ok bool, err error)

// Inputs is what a job's checkpoint had consumed of its inputs.
type Inputs struct {
	// Upstream are, per changelog the job reads, the newest version of it
	// consumed completely.
	Upstream []changelogfmt.UpstreamVersion
	// Changelogs says that the job reads changelogs. UpstreamEventTimeMs
	// is then the least event time of the versions it consumed completely,
	// over every changelog it reads: 0 (unknown) when it has consumed no
	// version of one, or one without event time.
	Changelogs          bool
	UpstreamEventTimeMs int64
	// Others says that the job also reads other inputs: their event time is
	// the watermark of its writers (aggmerge.Registration.EventTimeMs).
	// Sources are those of them that are Kafka topics (Version.Sources).
	Others  bool
	Sources []string
	// Cuts says that the job cuts its checkpoints on event-time
	// boundaries (kafka.Cuts): only a checkpoint at a boundary is a
	// version, and its event time is the boundary, CutMs (Unix
	// milliseconds; 0: the checkpoint is no cut, as a stop's).
	Cuts  bool
	CutMs int64
}

// eventTimeMs is the event time a writer group's checkpoint covers: the
// least of its writers' watermark (for inputs other than changelogs) and
// of the upstream versions' event time (for changelogs); 0 (unknown) when
// one of those it needs is unknown. A watermark drawn from changelog
// records (event_time on a changelog source) is their export time, not
// their sources': it is not used for a job that reads only changelogs.
// A job that cuts on event-time boundaries covers exactly its boundary.
func (in *Inputs) eventTimeMs(writers int64) int64 {
	if in.Cuts {
		return in.CutMs
	}
	e := int64(math.MaxInt64)
	if in.Others || !in.Changelogs {
		e = min(e, writers)
	}
	if in.Changelogs {
		e = min(e, in.UpstreamEventTimeMs)
	}
	return max(e, 0)
}

// localVersions bounds the versions kept in Config.VersionsFile.
const localVersions = 100

// versionState is the exporter's view of its versions: only Run's
// goroutine uses it; the last version is also in Exporter.mu for readers.
type versionState struct {
	// ends is, per partition, the Kafka offset past the last changelog
	// record committed: the end offsets of a version cut now.
	ends []int64
	last Version // the last version published (Version 0: none)
	// kept are the newest versions, oldest first, as in VersionsFile.
	kept []keptVersion
	// dueLog is, for the version dueVersion returned last, the table's
	// log offset per bucket at it (see keptVersion.LogEnds).
	dueLog []uint64
}

// keptVersion is a version as the exporter keeps it (VersionsFile): with
// the table's log end per bucket at it, where the export stood (every
// entry below was exported or passed over for good, every one from it on
// was undecided): the table's rows as of those log ends are the version's
// (Exporter.RowsAt).
type keptVersion struct {
	Version
	LogEnds []uint64 `json:"log_ends,omitempty"`
}

// versionsOn reports whether the exporter publishes versions: in committed
// mode unless NoVersions (uncommitted mode exports writes no checkpoint
// covers yet, which no version could name).
func (c *Config) versionsOn() bool { return c.Mode == Committed && !c.NoVersions }

// writers is what a version cut now would hold of the table's writers.
type writers struct {
	ok bool // every group is at one checkpoint
	// checkpoints are, per writer group, the checkpoint every one of its
	// writers committed.
	checkpoints []changelogfmt.WriterCheckpoint
	epochs      map[string]uint64 // writer id → registered epoch
	// eventTimes are, per writer group, the least event time its writers
	// recorded with the checkpoint (0: one of them has none).
	eventTimes map[string]int64
}

// currentWriters reads the registrations of the table's writers (the
// listed ones, Config.Writers, or all). It is not ok while the writers of
// a group disagree (a checkpoint is completing: its commit markers are
// being written) or one of them has not committed a checkpoint yet. Read
// before the log ends, every commit marker the checkpoints promise is below
// those ends.
func (x *Exporter) currentWriters() writers {
	regs := x.cfg.Table.Writers()
	if len(x.cfg.Writers) > 0 {
		byID := map[string]int{}
		for i, r := range regs {
			byID[r.Writer] = i
		}
		listed := regs[:0:0]
		for _, w := range x.cfg.Writers {
			i, ok := byID[w]
			if !ok {
				return writers{} // not registered yet
			}
			listed = append(listed, regs[i])
		}
		regs = listed
	}
	ws := writers{ok: true, epochs: map[string]uint64{}, eventTimes: map[string]int64{}}
	at := map[string]int{}
	for _, r := range regs {
		ws.epochs[r.Writer] = r.Epoch
		if !r.Committed {
			return writers{}
		}
		g := group(r.Writer)
		if e, ok := ws.eventTimes[g]; !ok || r.EventTimeMs < e {
			ws.eventTimes[g] = r.EventTimeMs
		}
		if i, ok := at[g]; ok {
			if ws.checkpoints[i].Checkpoint != r.Checkpoint {
				return writers{}
			}
			continue
		}
		at[g] = len(ws.checkpoints)
		ws.checkpoints = append(ws.checkpoints, changelogfmt.WriterCheckpoint{Writer: g, Job: r.Job, Checkpoint: r.Checkpoint})
	}
	slices.SortFunc(ws.checkpoints, func(a, b changelogfmt.WriterCheckpoint) int { return strings.Compare(a.Writer, b.Writer) })
	return ws
}

// same reports whether o holds the same checkpoints, epochs and event
// times.
func (w *writers) same(o *writers) bool {
	return w.ok == o.ok && slices.Equal(w.checkpoints, o.checkpoints) && maps.Equal(w.epochs, o.epochs) &&
		maps.Equal(w.eventTimes, o.eventTimes)
}

// versionPoint reports whether what the export has reached, after a
// selection up to ends, is exactly the writers' checkpoints ws:
//   - in every bucket the selection scanned the log to its end and passed
//     its last marker, so every entry a commit marker covers is exported
//     or discarded, and every entry after it is undecided, none exported;
//   - no writer group's last marker in a bucket is of a later checkpoint
//     than its registrations say (the marker of a checkpoint whose
//     registration is not updated yet);
//   - none is a rollback marker of the writer's current epoch: an undo
//     is under way (the restore's commit markers, written in one batch
//     after it in every bucket, come next, then its registration).
//
// The markers compared are those scanned since the session started; a
// restore writes one in every bucket, so they are of the writers' current
// timeline.
func versionPoint(cs []*cursor, ends []uint64, ws writers) bool {
	for _, c := range cs {
		end := ends[c.bucket]
		if c.done < end && (c.scanned < end || (c.marked && c.done <= c.lastMarker)) {
			return false
		}
		for _, w := range ws.checkpoints {
			m, ok := c.lastOf[w.Writer]
			if !ok {
				continue
			}
			if m.checkpoint > w.Checkpoint || (m.rollback && m.writer.Epoch == ws.epochs[m.writer.ID]) {
				return false
			}
		}
	}
	return true
}

// dueVersion returns the version to publish with the round whose
// selection just ended, or nil: none when the export is not at a version
// point or the upstream versions are not known yet. Its end offsets are
// filled in by transact.
func (x *Exporter) dueVersion(ctx context.Context, cs []*cursor, ends []uint64, ws writers) (*Version, error) {
	if !ws.ok || !versionPoint(cs, ends, ws) {
		return nil, nil
	}
	// Read again: a registration that changed meanwhile may belong to
	// markers below the ends that the first read did not account for (a
	// restore records its checkpoint just after its commit markers).
	if again := x.currentWriters(); !again.same(&ws) {
		return nil, nil
	}
	v := &Version{Table: x.cfg.Name, TableID: x.enc.id, Topic: x.cfg.Topic, ChangelogFormat: string(x.cfg.Format), Writers: ws.checkpoints,
		EventTimeMs: math.MaxInt64}
	x.ver.dueLog = make([]uint64, x.buckets) // 0 in the buckets not exported (Config.Buckets)
	for _, c := range cs {
		x.ver.dueLog[c.bucket] = min(c.done, ends[c.bucket])
	}
	for _, w := range ws.checkpoints {
		in, ok, err := x.inputs(ctx, w)
		if err != nil || !ok {
			return nil, err
		}
		if in.Cuts && in.CutMs <= 0 {
			return nil, nil // between two boundaries: no version
		}
		v.Upstream = append(v.Upstream, in.Upstream...)
		v.Sources = append(v.Sources, in.Sources...)
		v.EventTimeMs = min(v.EventTimeMs, in.eventTimeMs(ws.eventTimes[w.Writer]))
	}
	if len(ws.checkpoints) == 0 {
		v.EventTimeMs = 0
	}
	slices.SortFunc(v.Upstream, func(a, b changelogfmt.UpstreamVersion) int { return strings.Compare(a.Topic, b.Topic) })
	v.Upstream = slices.Compact(v.Upstream)
	slices.Sort(v.Sources)
	v.Sources = slices.Compact(v.Sources)
	return v, nil
}

// inputs is what w's job had consumed at w's checkpoint (Config.Upstream;
// without it, inputs other than changelogs).
func (x *Exporter) inputs(ctx context.Context, w changelogfmt.WriterCheckpoint) (Inputs, bool, error) {
	if x.cfg.Upstream == nil {
		return Inputs{Others: true}, true, nil
	}
	in, ok, err := x.cfg.Upstream(ctx, w.Job, w.Checkpoint)
	if err != nil {
		return Inputs{}, false, fmt.Errorf("upstream versions of job %q checkpoint %d: %w", w.Job, w.Checkpoint, err)
	}
	return in, ok, nil
}

// versionRecord completes v with the next number, the end offsets and the
// time, and returns its record; nil when v holds what the last version
// holds (nothing to publish).
func (x *Exporter) versionRecord(v *Version, ends []int64) (*kgo.Record, error) {
	if v == nil {
		return nil, nil
	}
	v.EndOffsets = ends
	if x.ver.last.Version > 0 && v.SameContent(&x.ver.last) {
		return nil, nil
	}
	v.Version = x.ver.last.Version + 1
	v.Format = changelogfmt.VersionFormat
	v.CommitTime = x.cfg.Now().UTC()
	return changelogfmt.VersionRecord(x.cfg.VersionsTopic, v, x.cfg.VersionsHistory)
}

// published records v as the last version, once its transaction
// committed, in memory and in VersionsFile.
func (x *Exporter) published(v *Version) error {
	x.ver.last = *v
	x.ver.kept = append(x.ver.kept, keptVersion{Version: *v, LogEnds: x.ver.dueLog})
	if n := len(x.ver.kept) - min(localVersions, x.cfg.VersionsHistory); n > 0 {
		x.ver.kept = slices.Delete(x.ver.kept, 0, n)
	}
	x.mu.Lock()
	x.mu.version = *v
	x.mu.kept = slices.Clone(x.ver.kept)
	x.mu.Unlock()
	x.m.version.Set(float64(v.Version))
	if x.cfg.VersionsFile == "" {
		return nil
	}
	if err := writeVersionsFile(x.cfg.VersionsFile, x.ver.kept); err != nil {
		return fmt.Errorf("keep version %d of %q: %w", v.Version, x.cfg.Name, err)
	}
	return nil
}

// versionsFile is the content of Config.VersionsFile.
type versionsFile struct {
	Format   int           `json:"format"`
	Versions []keptVersion `json:"versions"`
}

func writeVersionsFile(path string, vs []keptVersion) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, _, err := state.WriteFileAtomic(path, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(versionsFile{Format: changelogfmt.VersionFormat, Versions: vs})
	})
	return err
}

// ReadVersionsFile reads the versions an exporter kept in its
// Config.VersionsFile, oldest first (none when the file does not exist).
func ReadVersionsFile(path string) ([]Version, error) {
	kept, err := readVersionsFile(path)
	vs := make([]Version, len(kept))
	for i := range kept {
		vs[i] = kept[i].Version
	}
	return vs, err
}

func readVersionsFile(path string) ([]keptVersion, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read versions file: %w", err)
	}
	var f versionsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read versions file %s: %w", path, err)
	}
	if f.Format < 1 || f.Format > changelogfmt.VersionFormat {
		return nil, fmt.Errorf("read versions file %s: format %d, this build knows up to %d", path, f.Format, changelogfmt.VersionFormat)
	}
	return f.Versions, nil
}

// resumeVersions finds, at the start of a session, the last version
// published (in the versions topic, or the data dir's file if it is
// newer: numbers never go back, also when the topic was recreated) and the
// changelog's end offsets.
func (x *Exporter) resumeVersions(ctx context.Context, adm *kadm.Client, conn []kgo.Opt, last []lastExported) error {
	x.ver.ends = make([]int64, x.buckets)
	for p, l := range last {
		if l.found {
			x.ver.ends[p] = l.kafkaOffset + 1
		}
	}
	if !x.cfg.versionsOn() {
		return nil
	}
	compact := "compact"
	if err := x.ensureTopic(ctx, adm, x.cfg.VersionsTopic, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		return err
	}
	recs, err := lastCommitted(ctx, adm, conn, x.cfg.VersionsTopic, []int{0})
	if err != nil {
		return err
	}
	kept, err := readVersionsFile(x.cfg.VersionsFile)
	if err != nil {
		return err
	}
	x.ver.kept = kept
	x.ver.last = Version{}
	if len(kept) > 0 {
		x.ver.last = kept[len(kept)-1].Version
	}
	if r := recs[0]; r != nil {
		v, err := changelogfmt.DecodeVersion(r)
		if err != nil {
			return fmt.Errorf("%w: versions topic %q: %w", ErrMismatch, x.cfg.VersionsTopic, err)
		}
		if v.TableID != x.enc.id {
			return fmt.Errorf("%w: versions topic %q holds versions of table %q (id %s); this exporter writes table %q (id %s)",
				ErrMismatch, x.cfg.VersionsTopic, v.Table, v.TableID, x.cfg.Name, x.enc.id)
		}
		if v.Version >= x.ver.last.Version {
			x.ver.last = v
		}
	}
	if x.ver.last.Version > 0 {
		x.mu.Lock()
		x.mu.version = x.ver.last
		x.mu.kept = slices.Clone(x.ver.kept)
		x.mu.Unlock()
		x.m.version.Set(float64(x.ver.last.Version))
	}
	return nil
}

// LastVersion returns the last version the exporter published or found
// published; ok is false before there is one.
func (x *Exporter) LastVersion() (Version, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mu.version, x.mu.version.Version > 0
}

// LatestVersion reads the newest committed version of a versions topic
// (its last committed record, read_committed); ok is false when it holds
// none (or does not exist). A record that is not a version is
// changelogfmt.ErrVersion.
func LatestVersion(ctx context.Context, conn kafka.Connection, topic string) (v Version, ok bool, err error) {
	opts, err := conn.Options()
	if err != nil {
		return Version{}, false, fmt.Errorf("latest version of %q: %w", topic, err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return Version{}, false, fmt.Errorf("latest version of %q: %w", topic, err)
	}
	defer cl.Close()
	recs, err := lastCommitted(ctx, kadm.NewClient(cl), opts, topic, []int{0})
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return Version{}, false, nil
	}
	if err != nil {
		return Version{}, false, fmt.Errorf("latest version: %w", err)
	}
	if recs[0] == nil {
		return Version{}, false, nil
	}
	if v, err = changelogfmt.DecodeVersion(recs[0]); err != nil {
		return Version{}, false, fmt.Errorf("latest version of %q: %w", topic, err)
	}
	return v, true, nil
}

// Freshness is how far v is behind its sources at now: now minus the
// newest source event time v covers (Version.EventTimeMs); ok is false
// when v covers none. It is negative for event times in the future.
func Freshness(now time.Time, v *Version) (time.Duration, bool) {
	if v.EventTimeMs <= 0 {
		return 0, false
	}
	return now.Sub(time.UnixMilli(v.EventTimeMs)), true
}
