package repartition

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// Owned returns the repartition partitions that instance i of n owns in a
// static assignment: the partitions p with base.Owner(p, n) = i (none when
// n exceeds the partitions and i is past them).
func Owned(partitions, i, n int) []int32 {
	owned := make([]int32, 0, partitions/n+1)
	for p := range partitions {
		if base.Owner(p, n) == i {
			owned = append(owned, int32(p))
		}
	}
	return owned
}

// SourceConfig configures stage 2's reader of the owned partitions.
type SourceConfig struct {
	// Kafka is how the source reaches the cluster.
	Kafka kafka.Connection
	// Topic is the repartition topic.
	Topic string
	// Owned are the partitions this instance owns and applies.
	Owned []int32
	// Resume, if set, is where a fresh start reads each owned partition
	// (partition → offset; unlisted: the earliest): the handovers' Resume.
	// A restore reads from the job's checkpoint.
	Resume map[int32]int64
	// ResumeOnRestore makes Resume apply on restore too, instead of the
	// checkpoint's offsets (kafka.Config.StartOnRestore): under dynamic
	// ownership every start of stage 2 follows a handover of each owned
	// partition (Owners).
	ResumeOnRestore bool
	// Positions, if set, records the source's position in every owned
	// partition at each checkpoint, for the Publishers.
	Positions *kafka.Positions
	// OnError is what happens to a record that is no partial row of the
	// table or that the Router refuses (ErrColumns): the job fails
	// (kafka.Fail, the default), or it is skipped or dead-lettered to
	// DeadLetterTopic.
	OnError         kafka.ErrorPolicy
	DeadLetterTopic string
}

// NewSource returns a Kafka source reading the owned partitions of the
// repartition topic read_committed, from cfg.Resume (or the earliest
// offset) on a fresh start and from the job's checkpoint on restore,
// decoding each record into the row it carries and the writer of its job
// (a record that is not a partial row of the table, or that r refuses,
// goes to cfg.OnError: by default it fails the job, naming the record).
func NewSource(cfg SourceConfig, r *Router) (*kafka.Source[Partial], error) {
	if cfg.Owned == nil {
		return nil, fmt.Errorf("repartition source: no owned partitions given")
	}
	start := kafka.StartEarliest()
	if cfg.Resume != nil {
		start = kafka.StartOffsets(map[string]map[int32]int64{cfg.Topic: cfg.Resume})
	}
	src, err := kafka.NewSource(kafka.Config{
		Connection:      cfg.Kafka,
		Topics:          []string{cfg.Topic},
		Partitions:      cfg.Owned,
		Start:           start,
		StartOnRestore:  cfg.ResumeOnRestore,
		Positions:       cfg.Positions,
		OnDecodeError:   cfg.OnError,
		DeadLetterTopic: cfg.DeadLetterTopic,
	}, func() kafka.Decoder[Partial] {
		return func(rec *kgo.Record) (Partial, error) {
			var p Partial
			err := r.Decode(rec, &p)
			return p, err
		}
	})
	if err != nil {
		return nil, fmt.Errorf("repartition source: %w", err)
	}
	return src, nil
}
