package operators

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// DedupeConfig configures Dedupe.
type DedupeConfig[T any] struct {
	// Within is the horizon of event time: a record is a duplicate when a
	// record of its key was kept less than Within before or after it.
	Within time.Duration
	// EventTime returns a record's event time (Unix nanoseconds, package
	// watermark).
	EventTime func(T) int64
}

// Dedupe drops the records of ks whose key was seen within cfg.Within of
// event time: a record of key k at time t is kept unless a record of k
// kept before it (in the order they reach the subtask) has a time less than
// Within away from t. What is kept lives in keyed state ("dedupe.kept"),
// checkpointed and rescaled with the job, and expires with event time: a
// kept time is forgotten once the watermark reaches it plus Within, when no
// record that is not late could be its duplicate any more. A record late at
// this operator is compared only with what has not expired. Dropped
// records are counted in ebbflow_operator_duplicates_dropped_total.
func Dedupe[K comparable, T any](ks runtime.KeyedStream[K, T], name string, cfg DedupeConfig[T], opts ...runtime.NodeOption) (runtime.Stream[T], error) {
	if cfg.Within <= 0 {
		return runtime.Stream[T]{}, fmt.Errorf("dedupe %q: within %s is not positive", name, cfg.Within)
	}
	if cfg.EventTime == nil {
		return runtime.Stream[T]{}, fmt.Errorf("dedupe %q: no EventTime", name)
	}
	kc := ks.Codec()
	return runtime.Process(ks, name, func() runtime.KeyedProcessor[K, T, T] { return &deduper[K, T]{cfg: cfg, kc: kc} }, opts...), nil
}

// deduper is one subtask of Dedupe. Per key it keeps the event times of the
// records it kept whose horizon the watermark has not passed, ascending,
// with one timer per time at time+Within.
type deduper[K comparable, T any] struct {
	cfg     DedupeConfig[T]
	kc      state.Codec[K]
	kept    *state.Value[K, []int64]
	timers  *runtime.EventTimers[K]
	dropped prometheus.Counter
}

func (d *deduper[K, T]) Open(ctx *runtime.Context, keyed *state.Keyed) error {
	d.kept = state.NewValue(keyed, "dedupe.kept", d.kc, state.Codec[[]int64](state.JSONCodec[[]int64]{}))
	var err error
	if d.timers, err = runtime.NewEventTimers(ctx, keyed, d.kc); err != nil {
		return err
	}
	d.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_operator_duplicates_dropped_total",
		Help: "Records a dedupe step dropped: their key was seen within the horizon."})
	if err := ctx.Registerer.Register(d.dropped); err != nil {
		return fmt.Errorf("register dedupe metrics: %w", err)
	}
	return nil
}

func (d *deduper[K, T]) Process(key K, v T, out *runtime.Collector[T]) error {
	at := d.cfg.EventTime(v)
	kept, _, err := d.kept.Get(key)
	if err != nil {
		return err
	}
	within := int64(d.cfg.Within)
	for _, t := range kept {
		if diff := at - t; diff < within && diff > -within {
			d.dropped.Inc()
			return nil
		}
	}
	i, _ := slices.BinarySearch(kept, at)
	if err := d.kept.Put(key, slices.Insert(slices.Clip(kept), i, at)); err != nil {
		return err
	}
	if err := d.timers.Register(key, expiry(at, within)); err != nil {
		return err
	}
	out.Emit(v)
	return nil
}

// expiry is when a record kept at t stops mattering: t+within, saturated.
func expiry(t, within int64) int64 {
	if e := t + within; e > t {
		return e
	}
	return t // overflow: the end of event time
}

// OnEventTime forgets the times of key whose horizon ended at or before at.
func (d *deduper[K, T]) OnEventTime(key K, at int64, _ *runtime.Collector[T]) error {
	kept, ok, err := d.kept.Get(key)
	if err != nil || !ok {
		return err
	}
	within := int64(d.cfg.Within)
	n := 0
	for n < len(kept) && expiry(kept[n], within) <= at {
		n++
	}
	if n == len(kept) {
		return d.kept.Delete(key)
	}
	if n == 0 {
		return nil
	}
	return d.kept.Put(key, slices.Clone(kept[n:]))
}

func (d *deduper[K, T]) Close() error { return nil }
