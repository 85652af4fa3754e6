package export

import (
	"context"
	"errors"
	"fmt"

	"github.com/ebbflow/ebbflow/operators/kafka"
)

// SharedConfig configures ReadShared.
type SharedConfig struct {
	// Kafka is the connection to the cluster of the changelog.
	Kafka kafka.Connection
	// Topic is the changelog topic; Format its format (absent: the one
	// the versions record, else UpsertJSON).
	Topic  string
	Format Format
	// Owners are the exporters that share the topic, each exporting the
	// partitions it owns (Config.Buckets) and publishing its versions to
	// its own versions topic: the instances of a scaled job. Every
	// partition must have exactly one owner.
	Owners []Owner
}

// Owner is one exporter of a shared changelog topic.
type Owner struct {
	// Name says who it is in errors ("instance 1 of 2").
	Name string
	// VersionsTopic is where it publishes its versions.
	VersionsTopic string
	// Partitions are the partitions (buckets) it exports.
	Partitions []int
}

// SharedTable is a table whose changelog several owners export, read at
// the newest version of each.
type SharedTable struct {
	// Versions are the owners' newest versions, in the order of
	// SharedConfig.Owners.
	Versions []Version
	// Rows are the table: the record key (the primary key as JSON, as the
	// changelog writes it) → the row.
	Rows map[string]kafka.Row
}

// ErrNoVersion marks a shared table one of whose owners has published no
// version yet: its partitions have no committed state to read.
var ErrNoVersion = errors.New("export: an owner of the changelog has published no version yet")

// ReadShared reads a changelog topic that several owners share, as the
// instances of a scaled job do (docs/SCALING.md): it takes each owner's
// newest committed version (LatestVersion), joins their end offsets, each
// over the partitions its owner exports, and reads the table up to them
// (ReadTable, read_committed). The owners' versions are not checked for
// consistency with each other: each is its own instance's committed
// checkpoint, and the buckets they hold are disjoint. An owner without a
// version is ErrNoVersion.
func ReadShared(ctx context.Context, cfg SharedConfig) (*SharedTable, error) {
	if len(cfg.Owners) == 0 {
		return nil, fmt.Errorf("read shared changelog %q: no owners named", cfg.Topic)
	}
	out := &SharedTable{Versions: make([]Version, len(cfg.Owners))}
	err := each(len(cfg.Owners), func(i int) error {
		o := &cfg.Owners[i]
		v, ok, err := LatestVersion(ctx, cfg.Kafka, o.VersionsTopic)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", o.Name, err)
		case !ok:
			return fmt.Errorf("%w: %s (versions topic %q), the exporter of partitions %v", ErrNoVersion, o.Name, o.VersionsTopic, o.Partitions)
		}
		out.Versions[i] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read shared changelog %q: %w", cfg.Topic, err)
	}
	var until []int64
	owner := map[int]string{}
	for i, o := range cfg.Owners {
		v := &out.Versions[i]
		if v.Topic != cfg.Topic {
			return nil, fmt.Errorf("read shared changelog %q: %s's version %d is of topic %q", cfg.Topic, o.Name, v.Version, v.Topic)
		}
		if len(until) == 0 {
			until = make([]int64, len(v.EndOffsets))
		}
		for _, p := range o.Partitions {
			if p < 0 || p >= len(until) || len(v.EndOffsets) != len(until) {
				return nil, fmt.Errorf("read shared changelog %q: %s's version %d has %d partitions, the owners name partition %d",
					cfg.Topic, o.Name, v.Version, len(v.EndOffsets), p)
			}
			if other, ok := owner[p]; ok {
				return nil, fmt.Errorf("read shared changelog %q: partition %d has two owners, %s and %s", cfg.Topic, p, other, o.Name)
			}
			owner[p] = o.Name
			until[p] = v.EndOffsets[p]
		}
	}
	if len(owner) != len(until) {
		return nil, fmt.Errorf("read shared changelog %q: the owners name %d of its %d partitions", cfg.Topic, len(owner), len(until))
	}
	format := cfg.Format
	if format == "" {
		format = Format(out.Versions[0].ChangelogFormat)
	}
	if out.Rows, err = ReadTable(ctx, ReaderConfig{Kafka: cfg.Kafka, Topic: cfg.Topic, Format: format, Until: until}); err != nil {
		return nil, fmt.Errorf("read shared changelog %q: %w", cfg.Topic, err)
	}
	return out, nil
}
