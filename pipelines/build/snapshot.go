package build

import (
	"context"
	"errors"
	"fmt"

	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// Snapshot reads the named tables at the newest mutually consistent set of
// versions, or with weak the newest of each (export.ReadSnapshot), chosen
// among the versions the exporters keep when this Env hosts every table
// named (else, or when those hold no consistent set, among the versions
// topics'). A name
// is a table of this Env with a changelog, read from the table itself when
// its exporter keeps the version chosen (export.Exporter.RowsAt), else
// from its changelog; or, when no table has that name, the changelog topic
// of a table another runner hosts, read from Kafka on the cluster of this
// Env's changelogs (the first named table's, or the first table's). A
// version older than what the table's log retains is read from the
// changelog too (TableSnapshot.Local says which).
func (e *Env) Snapshot(ctx context.Context, names []string, weak bool) (*export.Snapshot, error) {
	byName := map[string]*changelogExport{}
	byTopic := map[string]*changelogExport{}
	for i := range e.exporters {
		ce := &e.exporters[i]
		byName[ce.name], byTopic[ce.spec.Topic] = ce, ce
	}
	cfg := export.SnapshotConfig{Weak: weak, Formats: map[string]export.Format{}, Local: e.rowsAt(byTopic),
		LocalVersions: func(topic string) ([]export.Version, bool) {
			if ce := byTopic[topic]; ce != nil {
				return ce.x.Versions(), true
			}
			return nil, false
		}}
	var cluster *changelogExport
	for _, n := range names {
		ce := byName[n]
		if ce == nil {
			if _, ok := e.tables[n]; ok {
				return nil, fmt.Errorf("%w: table %q has no changelog, hence no versions", ErrSnapshotName, n)
			}
			cfg.Topics = append(cfg.Topics, n)
			continue
		}
		if cluster == nil {
			cluster = ce
		} else if ce.spec.Cluster() != cluster.spec.Cluster() {
			return nil, fmt.Errorf("%w: the changelogs of tables %q and %q are on different clusters (%s, %s)",
				ErrSnapshotName, cluster.name, ce.name, cluster.spec.Cluster(), ce.spec.Cluster())
		}
		cfg.Topics = append(cfg.Topics, ce.spec.Topic)
		cfg.Formats[ce.spec.Topic] = export.Format(ce.spec.Format)
	}
	if cluster == nil {
		if len(e.exporters) == 0 {
			return nil, fmt.Errorf("%w: no table of this runner has a changelog, and %q are none of its tables", ErrSnapshotName, names)
		}
		cluster = &e.exporters[0]
	}
	conn, err := e.KafkaConnection(cluster.spec.Connection)
	if err != nil {
		return nil, err
	}
	cfg.Kafka = conn
	return export.ReadSnapshot(ctx, cfg)
}

// ErrSnapshotName marks a Snapshot of a name that cannot be read.
var ErrSnapshotName = errors.New("build: cannot read that table at a version")

// rowsAt is the export.SnapshotConfig.Local of the tables byTopic.
func (e *Env) rowsAt(byTopic map[string]*changelogExport) func(string, *export.Version) (export.Rows, bool, error) {
	return func(topic string, v *export.Version) (export.Rows, bool, error) {
		ce := byTopic[topic]
		if ce == nil {
			return export.Rows{}, false, nil
		}
		rows, ok, err := ce.x.RowsAt(v)
		if errors.Is(err, export.ErrPastRetention) {
			// The table's log no longer reaches back to v: its changelog
			// still does.
			e.log.Debug("snapshot: version past the table's log, read from the changelog", "table", ce.name, "version", v.Version, "err", err)
			return export.Rows{}, false, nil
		}
		return rows, ok, err
	}
}
