package export

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// SnapshotConfig configures ReadSnapshot.
type SnapshotConfig struct {
	// Kafka is the connection to the cluster of the changelogs.
	Kafka kafka.Connection
	// Topics are the changelog topics of the tables to read.
	Topics []string
	// Formats are the topics' formats (absent: the one the version
	// records, else UpsertJSON).
	Formats map[string]Format
	// Weak reads the newest version of each table, without checking that
	// they are consistent.
	Weak bool
	// VersionsTopicOf names the versions topic of each changelog topic
	// (nil: changelogfmt.VersionsTopic).
	VersionsTopicOf func(string) string
	// Local, if set, reads a table as of a version without Kafka: in the
	// runner that hosts the table (Exporter.RowsAt). ok false: not hosted
	// here, or the version is not known here yet; the table is then read
	// from its changelog.
	Local func(topic string, v *Version) (rows Rows, ok bool, err error)
	// LocalVersions, if set, returns the versions of a table that the
	// runner hosting it keeps (Exporter.Versions); ok false: not hosted
	// here. When every table has them, the versions are chosen among
	// those, without reading the versions topics, unless no consistent
	// set is among them (the history kept is short): then from Kafka.
	LocalVersions func(topic string) (vs []Version, ok bool)
}

// Snapshot is the tables at a set of versions.
type Snapshot struct {
	// Consistent is true when the versions are mutually consistent
	// (ChooseVersions); false for a weak read (the newest of each,
	// unchecked).
	Consistent bool
	// Tables are in the order of SnapshotConfig.Topics.
	Tables []TableSnapshot
}

// TableSnapshot is one table at one version.
type TableSnapshot struct {
	Topic   string
	Version Version
	// Rows are the table at the version.
	Rows Rows
	// Local is true when the rows come from the hosting runner's table
	// (SnapshotConfig.Local), false when from the changelog topic.
	Local bool
}

// ReadSnapshot reads the versions of every table (ReadVersions), chooses
// a set (ChooseVersions: the newest mutually consistent one, or with Weak
// the newest of each) and reads each table at its version: locally when
// SnapshotConfig.Local can, else from its changelog up to the version's
// end offsets (read_committed; ErrPastRetention when the topic no longer
// holds its start). No consistent set is ErrInconsistent
// (*InconsistentError says why).
//
// Reading a changelog is exact unless the topic is compacted: compaction
// may drop a key's record that a later one, past the version, replaces.
func ReadSnapshot(ctx context.Context, cfg SnapshotConfig) (*Snapshot, error) {
	if len(cfg.Topics) == 0 {
		return nil, errors.New("read snapshot: no tables named")
	}
	versionsTopic := cfg.VersionsTopicOf
	if versionsTopic == nil {
		versionsTopic = changelogfmt.VersionsTopic
	}
	var chosen []Version
	if tvs, ok := hostedVersions(cfg); ok {
		// No consistent set among the versions kept here is no error yet:
		// the versions topics may hold one.
		chosen, _ = ChooseVersions(tvs, cfg.Weak)
	}
	var err error
	if chosen == nil {
		tvs := make([]TableVersions, len(cfg.Topics))
		err = each(len(cfg.Topics), func(i int) error {
			vs, err := ReadVersions(ctx, cfg.Kafka, versionsTopic(cfg.Topics[i]))
			tvs[i] = TableVersions{Topic: cfg.Topics[i], Versions: vs}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
		if chosen, err = ChooseVersions(tvs, cfg.Weak); err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
	}
	s := &Snapshot{Consistent: !cfg.Weak, Tables: make([]TableSnapshot, len(chosen))}
	err = each(len(chosen), func(i int) error {
		t := &s.Tables[i]
		t.Topic, t.Version = cfg.Topics[i], chosen[i]
		var err error
		if cfg.Local != nil {
			if t.Rows, t.Local, err = cfg.Local(t.Topic, &t.Version); err != nil || t.Local {
				return err
			}
		}
		format := cfg.Formats[t.Topic]
		if format == "" {
			format = Format(t.Version.ChangelogFormat)
		}
		t.Rows.m, err = ReadTable(ctx, ReaderConfig{Kafka: cfg.Kafka, Topic: t.Topic, Format: format, Until: t.Version.EndOffsets})
		if err != nil {
			return fmt.Errorf("version %d: %w", t.Version.Version, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	return s, nil
}

// hostedVersions returns the versions of every table from
// SnapshotConfig.LocalVersions, ok only when it has them for all.
func hostedVersions(cfg SnapshotConfig) ([]TableVersions, bool) {
	if cfg.LocalVersions == nil {
		return nil, false
	}
	tvs := make([]TableVersions, len(cfg.Topics))
	for i, topic := range cfg.Topics {
		vs, ok := cfg.LocalVersions(topic)
		if !ok || len(vs) == 0 {
			return nil, false
		}
		tvs[i] = TableVersions{Topic: topic, Versions: vs}
	}
	return tvs, true
}

// each runs fn(0..n-1) concurrently and returns their errors joined, once
// every one returned.
func each(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Versions returns the versions the exporter keeps (see
// Config.VersionsFile: the newest, up to 100), oldest first; none while
// it has not published the last version it found published (it restarted
// after a crash that lost it from the file), so that a reader of them
// never misses the newest.
func (x *Exporter) Versions() []Version {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := len(x.mu.kept)
	if n == 0 || x.mu.kept[n-1].Version.Version != x.mu.version.Version {
		return nil
	}
	vs := make([]Version, n)
	for i := range x.mu.kept {
		vs[i] = x.mu.kept[i].Version
	}
	return vs
}

// RowsAt reads the table as of version v, which this exporter published
// (one of the newest it keeps, see Config.VersionsFile): the table's rows
// as of the log ends kept with it (aggmerge.Table.RowsAt: the rows now and
// the log's before-images), as ReadTable would read them from the
// changelog up to v's end offsets. ok is false when it keeps no such
// version. A version whose log the table no longer retains is
// ErrPastRetention.
func (x *Exporter) RowsAt(v *Version) (rows Rows, ok bool, err error) {
	var at []uint64
	x.mu.Lock()
	for i := range x.mu.kept {
		k := &x.mu.kept[i]
		if k.Version.Version == v.Version && k.TableID == v.TableID && k.SameContent(v) && k.LogEnds != nil {
			at = k.LogEnds
		}
	}
	x.mu.Unlock()
	if at == nil {
		return Rows{}, false, nil
	}
	set, err := x.cfg.Table.RowsAt(at)
	if errors.Is(err, aggmerge.ErrBelowLogStart) {
		err = fmt.Errorf("%w: %w", ErrPastRetention, err)
	}
	if err != nil {
		return Rows{}, false, fmt.Errorf("read table %q at version %d: %w", x.cfg.Name, v.Version, err)
	}
	return Rows{set: set, schema: &x.enc.schema}, true, nil
}
