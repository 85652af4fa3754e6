package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// VersionBoundaries follows the versions topics of ebbflow changelogs for
// a Kafka source aligned on them (kafka.Config.Align): it is the source's
// kafka.Boundaries.
type VersionBoundaries struct {
	conn            []kgo.Opt
	versionsTopicOf func(string) string
}

// NewVersionBoundaries returns the boundaries of the changelogs a source
// connected by conn reads. versionsTopicOf names the versions topic of
// each changelog topic (nil: changelogfmt.VersionsTopic).
func NewVersionBoundaries(conn kafka.Connection, versionsTopicOf func(string) string) (*VersionBoundaries, error) {
	opts, err := conn.Options()
	if err != nil {
		return nil, fmt.Errorf("version boundaries: %w", err)
	}
	if versionsTopicOf == nil {
		versionsTopicOf = changelogfmt.VersionsTopic
	}
	return &VersionBoundaries{conn: opts, versionsTopicOf: versionsTopicOf}, nil
}

// Follow reads the versions topics of topics, read_committed, from their
// start, until ctx ends. A versions topic that does not exist yet is read
// once it does. A record that is not a version ends it with an error.
func (b *VersionBoundaries) Follow(ctx context.Context, topics []string, found func(kafka.Boundary)) error {
	of := map[string]string{} // versions topic → changelog topic
	for _, t := range topics {
		of[b.versionsTopicOf(t)] = t
	}
	cl, err := kgo.NewClient(append(slices.Clip(b.conn),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(slices.Sorted(maps.Keys(of))...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A versions topic created after the source opened (its exporter
		// starts later) is found at the next metadata refresh.
		kgo.MetadataMinAge(200*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("follow versions: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, kgo.ErrClientClosed) && ferr == nil {
				ferr = fmt.Errorf("follow versions %s/%d: %w", topic, partition, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var derr error
		fs.EachRecord(func(rec *kgo.Record) {
			if derr != nil {
				return
			}
			v, err := changelogfmt.DecodeVersion(rec)
			if err != nil {
				derr = fmt.Errorf("follow versions %q: %w", rec.Topic, err)
				return
			}
			found(kafka.Boundary{Topic: of[rec.Topic], Version: v.Version, EndOffsets: v.EndOffsets})
		})
		if derr != nil {
			return derr
		}
	}
}
