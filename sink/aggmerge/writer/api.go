package writer

import (
	"github.com/ebbflow/ebbflow/runtime"
)

// To adds the exactly-once writer of cfg.Table to the job, reading s. Each
// record is mapped once, by the operator "<name>-map", into its bucket,
// encoded key and values; the mapped records are partitioned by bucket (node
// "<name>-by-bucket") so each bucket has one writer subtask, then written by
// the sink "<name>", which refuses a record of a bucket it does not own.
// opts apply to all three (set the parallelism there). It fails, when the
// job is built, if the configuration does not fit the table.
func To[T any](s runtime.Stream[T], name string, cfg Config, mapper Mapper[T], opts ...runtime.NodeOption) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	mapped := runtime.Apply(s, name+"-map", func() runtime.Operator[T, record] { return newMapOp(cfg, mapper) }, opts...)
	byBucket := runtime.PartitionBy(mapped, name+"-by-bucket", func() func(record) int {
		return func(r record) int { return int(r.bucket) }
	}, opts...)
	runtime.SinkTo(byBucket, name, func() runtime.Sink[record] { return newSink(cfg) }, opts...)
	return nil
}
