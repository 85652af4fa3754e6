package writer

import (
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// To adds the exactly-once writer of cfg.Table to the job, reading s: the
// records are partitioned by bucket (node "<name>-by-bucket") so each bucket
// has one writer subtask, then written by the sink "<name>". opts apply to
// both (set the parallelism there). It fails, when the job is built, if the
// configuration does not fit the table.
func To[T any](s runtime.Stream[T], name string, cfg Config, mapper Mapper[T], opts ...runtime.NodeOption) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	t := cfg.Table
	buckets := t.Schema().Buckets
	byBucket := runtime.PartitionBy(s, name+"-by-bucket", func() func(T) int {
		var row Row
		var key []byte
		return func(v T) int {
			if err := mapper(v, &row); err != nil {
				return 0 // the sink's own mapping reports it
			}
			var err error
			if key, err = t.AppendKey(key[:0], row.Key); err != nil {
				return 0
			}
			return aggmerge.BucketOf(key, buckets)
		}
	}, opts...)
	runtime.SinkTo(byBucket, name, func() runtime.Sink[T] { return newSink(cfg, mapper) }, opts...)
	return nil
}
