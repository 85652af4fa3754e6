package state

// Value holds one value of V per key.
type Value[K comparable, V any] struct {
	t *table[K, V]
}

// NewValue registers a value state called name on kd. Names identify state
// across restores: keep them stable. A name used twice panics.
func NewValue[K comparable, V any](kd *Keyed, name string, kc Codec[K], vc Codec[V]) *Value[K, V] {
	return &Value[K, V]{t: newTable(kd, name, kc, vc)}
}

// Get returns the value of k and whether it has one.
func (s *Value[K, V]) Get(k K) (V, bool, error) { return s.t.get(k) }

// Put sets the value of k.
func (s *Value[K, V]) Put(k K, v V) error { return s.t.set(k, v, true) }

// Delete removes the value of k.
func (s *Value[K, V]) Delete(k K) error {
	var zero V
	return s.t.set(k, zero, false)
}

// Scan calls fn for every key with a value in the subtask's key groups, in
// the order of their key group, then of their encoded key. It writes the
// cache to the backend first (as a barrier would); fn must not change the
// state. It reads every entry: for rebuilding in-memory indexes in Open,
// such as the runtime's event-time timers, not for the record path.
func (s *Value[K, V]) Scan(fn func(k K, v V) error) error { return s.t.scan(fn) }

// LoadAll is Scan that also puts every value it reads into the cache. If
// they all fit, the cache knows the whole state from then on: Get of a key
// without a value reads nothing from the backend (a state of many new
// keys, such as the open windows of a window operator, would otherwise pay
// a backend read that misses for each), until the cache evicts one of the
// values. Call it in Open, before the state is used; fn must not change
// the state.
func (s *Value[K, V]) LoadAll(fn func(k K, v V) error) error { return s.t.loadAll(fn) }

// Reducing holds per key the fold of every value added with reduce.
type Reducing[K comparable, V any] struct {
	t      *table[K, V]
	reduce func(acc, v V) V
}

// NewReducing registers a reducing state called name on kd: Add(k, v) stores
// reduce(old, v), or v for a key without a value.
func NewReducing[K comparable, V any](kd *Keyed, name string, kc Codec[K], vc Codec[V], reduce func(acc, v V) V) *Reducing[K, V] {
	return &Reducing[K, V]{t: newTable(kd, name, kc, vc), reduce: reduce}
}

// Add folds v into the value of k.
func (s *Reducing[K, V]) Add(k K, v V) error {
	acc, ok, err := s.t.get(k)
	if err != nil {
		return err
	}
	if ok {
		v = s.reduce(acc, v)
	}
	return s.t.set(k, v, true)
}

// Get returns the folded value of k and whether it has one.
func (s *Reducing[K, V]) Get(k K) (V, bool, error) { return s.t.get(k) }

// Clear removes the value of k.
func (s *Reducing[K, V]) Clear(k K) error {
	var zero V
	return s.t.set(k, zero, false)
}

// AggregateFunction folds inputs of type In into an accumulator Acc and
// derives a result Out from it.
type AggregateFunction[In, Acc, Out any] interface {
	CreateAccumulator() Acc
	Add(acc Acc, in In) Acc
	Result(acc Acc) Out
}

// Aggregating holds per key an accumulator (stored with its codec) that
// every added input is folded into.
type Aggregating[K comparable, In, Acc, Out any] struct {
	t *table[K, Acc]
	f AggregateFunction[In, Acc, Out]
}

// NewAggregating registers an aggregating state called name on kd.
func NewAggregating[K comparable, In, Acc, Out any](kd *Keyed, name string, kc Codec[K], ac Codec[Acc], f AggregateFunction[In, Acc, Out]) *Aggregating[K, In, Acc, Out] {
	return &Aggregating[K, In, Acc, Out]{t: newTable(kd, name, kc, ac), f: f}
}

// Add folds in into the accumulator of k (a new one for a key without).
func (s *Aggregating[K, In, Acc, Out]) Add(k K, in In) error {
	acc, ok, err := s.t.get(k)
	if err != nil {
		return err
	}
	if !ok {
		acc = s.f.CreateAccumulator()
	}
	return s.t.set(k, s.f.Add(acc, in), true)
}

// Get returns the result for k and whether anything was added for it.
func (s *Aggregating[K, In, Acc, Out]) Get(k K) (Out, bool, error) {
	acc, ok, err := s.t.get(k)
	if err != nil || !ok {
		var zero Out
		return zero, false, err
	}
	return s.f.Result(acc), true, nil
}

// Clear removes the accumulator of k.
func (s *Aggregating[K, In, Acc, Out]) Clear(k K) error {
	var zero Acc
	return s.t.set(k, zero, false)
}
