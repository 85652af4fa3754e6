package runtime_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

// Benchmarks count one op per record: ns/op is ns per record, allocs/op
// allocations per record. Run with: go test ./runtime -run ^$ -bench . -benchtime 20000000x

func benchJob(b *testing.B, par int, interval time.Duration, keyed bool, build func(j *runtime.Job, sink func() runtime.Sink[operators.Event])) {
	var got atomic.Int64
	reg := newRegistry()
	opts := runtime.Options{Name: "bench", DataDir: b.TempDir(), Parallelism: par, Registerer: reg,
		Checkpoint: runtime.CheckpointOptions{Interval: interval}}
	if keyed {
		opts.StateBackend = pebblestate.NewFactory(pebblestate.Options{})
	}
	j := runtime.NewJob(opts)
	build(j, operators.NewDiscard[operators.Event](&got))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cputime.Process()
	if err := j.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	cpu = cputime.Process() - cpu
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
	if got.Load() != int64(b.N) {
		b.Fatalf("%d records reached the sink, want %d", got.Load(), b.N)
	}
	hist := func(name string) (count uint64, meanMS float64) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				h := mf.GetMetric()[0].GetHistogram()
				if h.GetSampleCount() > 0 {
					return h.GetSampleCount(), 1000 * h.GetSampleSum() / float64(h.GetSampleCount())
				}
			}
		}
		return 0, 0
	}
	// Checkpoints off still takes the initial and the final checkpoint.
	n, ckpt := hist("ebbflow_checkpoint_duration_seconds")
	b.ReportMetric(float64(n), "ckpts")
	if interval > 0 {
		_, align := hist("ebbflow_checkpoint_alignment_seconds")
		_, sync := hist("ebbflow_checkpoint_sync_seconds")
		b.ReportMetric(ckpt, "ckpt-ms")
		b.ReportMetric(align, "align-ms")
		b.ReportMetric(sync, "sync-ms")
	}
}

func intervals() []time.Duration { return []time.Duration{0, time.Second} }

func BenchmarkChainedMapFilter(b *testing.B) {
	benchChainedMapFilter(b, operators.SequenceConfig{Splits: 2})
}

// BenchmarkChainedMapFilterWatermarks is BenchmarkChainedMapFilter with
// event time: every record gets one from its Seq, each split tracks it,
// and watermarks go down the chain every 200ms. time=step reads it off the
// record (SequenceConfig.TimeStep, as a Kafka source reads a record's
// timestamp), time=func calls a function per record (EventTime). The
// difference to BenchmarkChainedMapFilter, run interleaved, is the
// watermark overhead (docs/BENCHMARKS.md).
func BenchmarkChainedMapFilterWatermarks(b *testing.B) {
	b.Run("time=step", func(b *testing.B) {
		benchChainedMapFilter(b, operators.SequenceConfig{Splits: 2, TimeStep: time.Millisecond, MaxOutOfOrderness: time.Second})
	})
	b.Run("time=func", func(b *testing.B) {
		benchChainedMapFilter(b, operators.SequenceConfig{Splits: 2,
			EventTime: func(seq uint64) int64 { return int64(seq) * int64(time.Millisecond) }, MaxOutOfOrderness: time.Second})
	})
}

// benchChainedMapFilter runs source → map → filter → discard on a sequence
// of b.N records configured by cfg, at parallelism 1 and 2, with
// checkpoints off and every second.
func benchChainedMapFilter(b *testing.B, cfg operators.SequenceConfig) {
	for _, par := range []int{1, 2} {
		for _, iv := range intervals() {
			b.Run(fmt.Sprintf("p=%d/checkpoint=%s", par, iv), func(b *testing.B) {
				benchJob(b, par, iv, false, func(j *runtime.Job, sink func() runtime.Sink[operators.Event]) {
					cfg.Count = uint64(b.N)
					src := runtime.FromSource(j, "seq", operators.NewSequence(cfg))
					m := runtime.Map(src, "map", func(e operators.Event) operators.Event { e.Value++; return e })
					f := runtime.Filter(m, "filter", func(e operators.Event) bool { return e.Value != 0 })
					runtime.SinkTo(f, "discard", sink)
				})
			})
		}
	}
}

func BenchmarkKeyByExchange(b *testing.B) {
	for _, par := range []int{1, 2} {
		for _, iv := range intervals() {
			b.Run(fmt.Sprintf("p=%d/checkpoint=%s", par, iv), func(b *testing.B) {
				benchJob(b, par, iv, false, func(j *runtime.Job, sink func() runtime.Sink[operators.Event]) {
					src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: uint64(b.N), Splits: 2, Keys: 100_000}))
					ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
					p := runtime.Process(ks, "pass", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] { return passKeyed{} })
					runtime.SinkTo(p, "discard", sink)
				})
			})
		}
	}
}

func BenchmarkKeyedSumPebble(b *testing.B) {
	for _, par := range []int{1, 2} {
		for _, iv := range intervals() {
			b.Run(fmt.Sprintf("p=%d/checkpoint=%s", par, iv), func(b *testing.B) {
				benchJob(b, par, iv, true, func(j *runtime.Job, sink func() runtime.Sink[operators.Event]) {
					src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: uint64(b.N), Splits: 2, Keys: 100_000}))
					ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
					sums := runtime.Reduce(ks, "sum", func(acc, v operators.Event) operators.Event { v.Value += acc.Value; return v }, eventCodec{})
					runtime.SinkTo(sums, "discard", sink)
				})
			})
		}
	}
}

// passKeyed forwards records: a keyBy exchange without state.
type passKeyed struct{}

func (passKeyed) Open(*runtime.Context, *state.Keyed) error { return nil }
func (passKeyed) Process(_ uint64, v operators.Event, out *runtime.Collector[operators.Event]) error {
	out.Emit(v)
	return nil
}
func (passKeyed) Close() error { return nil }

// eventCodec is a compact binary codec for the benchmark's state.
type eventCodec struct{}

func (eventCodec) Append(dst []byte, e operators.Event) []byte {
	dst = state.Uint64Codec{}.Append(dst, e.Seq)
	dst = state.Uint64Codec{}.Append(dst, e.Key)
	return state.Int64Codec{}.Append(dst, e.Value)
}

func (eventCodec) Decode(src []byte) (operators.Event, error) {
	if len(src) != 24 {
		return operators.Event{}, fmt.Errorf("event: %d bytes: %w", len(src), state.ErrCorrupt)
	}
	seq, _ := state.Uint64Codec{}.Decode(src[:8])
	key, _ := state.Uint64Codec{}.Decode(src[8:16])
	v, _ := state.Int64Codec{}.Decode(src[16:])
	return operators.Event{Seq: seq, Key: key, Value: v}, nil
}
