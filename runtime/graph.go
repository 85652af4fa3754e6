package runtime

import (
	"fmt"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/state"
)

// Stream is a typed handle on the output of an operator of a job under
// construction.
type Stream[T any] struct {
	job  *Job
	node *node
}

// KeyedStream is a stream partitioned by key: every record of one key goes
// to the same subtask of the next operator, chosen by key group (see
// package state), so keyed state can be rescaled.
type KeyedStream[K comparable, T any] struct {
	Stream[T]
	key   func(T) K
	codec state.Codec[K]
}

// Job returns the job the stream belongs to.
func (s Stream[T]) Job() *Job { return s.job }

// NodeOption configures one operator.
type NodeOption func(*node)

// WithParallelism sets the operator's number of subtasks.
func WithParallelism(p int) NodeOption { return func(n *node) { n.parallelism = p } }

// partKind is how records of an edge are routed to the downstream subtasks.
type partKind uint8

const (
	partForward   partKind = iota // subtask i → subtask i (chained when possible)
	partRebalance                 // round-robin
	partBroadcast                 // every record to every subtask
	partHash                      // by key group of the record's key
	partCustom                    // by a user function: partition mod parallelism
)

func (k partKind) String() string {
	return [...]string{"forward", "rebalance", "broadcast", "hash", "custom"}[k]
}

// node is one logical operator. Its typed behaviour is captured in closures
// made by the generic constructors, so the planner works on untyped nodes.
type node struct {
	id          int
	uid         string
	parallelism int
	inputs      []*edge
	outputs     []*edge
	source      bool
	keyed       bool
	// instantiate builds one subtask: out is the typed downstream consumer
	// (nil for sinks); it returns the link and its typed input consumer
	// (nil for sources).
	instantiate func(out any) (link, any)
	// fanout joins several typed downstream consumers into one.
	fanout func(outs []any) any
	// discard is a consumer of the node's output for a node nobody reads
	// (nil for sinks, which have no output).
	discard func() any
	// deliver pushes an envelope's records into the typed input consumer and
	// releases the batch; it returns the number of records.
	deliver func(in any, records any) (int, error)
}

// edge connects two nodes. newWriter, made where the record type is known,
// builds the exchange writer one upstream subtask uses, partitioning by the
// edge's kind as the plan left it (a forward edge between unequal
// parallelisms becomes a rebalance there).
type edge struct {
	from, to  *node
	kind      partKind
	newWriter func(x *exchangeSpec, kind partKind) exchange
}

func (j *Job) addNode(uid string, opts []NodeOption, n *node) *node {
	if j.built {
		panic("runtime: job already built")
	}
	if uid == "" {
		j.errs = append(j.errs, fmt.Errorf("operator %d: empty name", len(j.nodes)))
	}
	if _, dup := j.uids[uid]; dup {
		j.errs = append(j.errs, fmt.Errorf("operator %q: name used twice (names are the state's identity)", uid))
	}
	j.uids[uid] = struct{}{}
	n.id, n.uid, n.parallelism = len(j.nodes), uid, j.opts.Parallelism
	for _, o := range opts {
		o(n)
	}
	if n.parallelism < 1 {
		j.errs = append(j.errs, fmt.Errorf("operator %q: parallelism %d < 1", uid, n.parallelism))
	}
	if n.parallelism > j.opts.MaxParallelism {
		j.errs = append(j.errs, fmt.Errorf("operator %q: parallelism %d > max parallelism %d", uid, n.parallelism, j.opts.MaxParallelism))
	}
	j.nodes = append(j.nodes, n)
	return n
}

func connect[T any](from *node, to *node, kind partKind, part func() func(T, int) int) {
	e := &edge{from: from, to: to, kind: kind}
	e.newWriter = func(x *exchangeSpec, kind partKind) exchange { return newExchangeWriter[T](x, kind, part) }
	from.outputs = append(from.outputs, e)
	to.inputs = append(to.inputs, e)
}

// typedNode fills the closures shared by every node with input type In and
// output type Out.
func typedNode[In, Out any](n *node) *node {
	n.fanout = func(outs []any) any {
		if len(outs) == 1 {
			return outs[0]
		}
		f := make(fanout[Out], len(outs))
		for i, o := range outs {
			f[i] = o.(consumer[Out])
		}
		return f
	}
	n.discard = func() any { return discard[Out]{} }
	n.deliver = func(in any, records any) (int, error) {
		b := records.(*batch[In])
		k := len(b.items)
		err := in.(consumer[In]).push(b.items)
		b.release()
		return k, err
	}
	return n
}

// fanout pushes every batch to several consumers (a stream read by several
// operators).
type fanout[T any] []consumer[T]

func (f fanout[T]) push(b []T) error {
	for _, c := range f {
		if err := c.push(b); err != nil {
			return err
		}
	}
	return nil
}

// FromSource adds a source to the job.
func FromSource[T any](j *Job, name string, src func() Source[T], opts ...NodeOption) Stream[T] {
	n := j.addNode(name, opts, &node{source: true})
	typedNode[struct{}, T](n)
	n.instantiate = func(out any) (link, any) {
		return &sourceLink[T]{src: src(), out: out.(consumer[T]), batchSize: j.opts.BatchSize}, nil
	}
	return Stream[T]{job: j, node: n}
}

// Apply adds a custom operator reading s.
func Apply[In, Out any](s Stream[In], name string, op func() Operator[In, Out], opts ...NodeOption) Stream[Out] {
	j := s.job
	n := j.addNode(name, opts, &node{})
	typedNode[In, Out](n)
	n.instantiate = func(out any) (link, any) {
		l := &operatorLink[In, Out]{op: op()}
		l.out = Collector[Out]{buf: make([]Out, 0, j.opts.BatchSize), next: out.(consumer[Out])}
		return l, l
	}
	connect[In](s.node, n, partForward, nil)
	return Stream[Out]{job: j, node: n}
}

// Map applies f to every record.
func Map[In, Out any](s Stream[In], name string, f func(In) Out, opts ...NodeOption) Stream[Out] {
	j := s.job
	n := j.addNode(name, opts, &node{})
	typedNode[In, Out](n)
	n.instantiate = func(out any) (link, any) {
		l := &mapLink[In, Out]{f: f, out: out.(consumer[Out]), buf: make([]Out, 0, j.opts.BatchSize)}
		return l, l
	}
	connect[In](s.node, n, partForward, nil)
	return Stream[Out]{job: j, node: n}
}

// Filter keeps the records for which keep returns true.
func Filter[T any](s Stream[T], name string, keep func(T) bool, opts ...NodeOption) Stream[T] {
	j := s.job
	n := j.addNode(name, opts, &node{})
	typedNode[T, T](n)
	n.instantiate = func(out any) (link, any) {
		l := &filterLink[T]{keep: keep, out: out.(consumer[T]), buf: make([]T, 0, j.opts.BatchSize)}
		return l, l
	}
	connect[T](s.node, n, partForward, nil)
	return Stream[T]{job: j, node: n}
}

// FlatMap calls f for every record; f emits any number of results.
func FlatMap[In, Out any](s Stream[In], name string, f func(In, *Collector[Out]) error, opts ...NodeOption) Stream[Out] {
	return Apply(s, name, func() Operator[In, Out] { return flatMapOp[In, Out](f) }, opts...)
}

// KeyBy partitions s by key. codec encodes keys for hashing and keyed state;
// nil picks state.CodecFor[K](). key runs on every subtask of s at once,
// so it must be safe for concurrent use (no buffer shared between calls).
func KeyBy[K comparable, T any](s Stream[T], key func(T) K, codec state.Codec[K]) KeyedStream[K, T] {
	if codec == nil {
		codec = state.CodecFor[K]()
	}
	return KeyedStream[K, T]{Stream: s, key: key, codec: codec}
}

// Codec returns the codec of the stream's keys, for a processor's keyed
// state and timers.
func (ks KeyedStream[K, T]) Codec() state.Codec[K] { return ks.codec }

// Process adds a keyed processor reading ks.
func Process[K comparable, In, Out any](ks KeyedStream[K, In], name string, p func() KeyedProcessor[K, In, Out], opts ...NodeOption) Stream[Out] {
	j := ks.job
	n := j.addNode(name, opts, &node{keyed: true})
	typedNode[In, Out](n)
	key, codec := ks.key, ks.codec
	n.instantiate = func(out any) (link, any) {
		l := &keyedLink[K, In, Out]{proc: p(), key: key, codec: codec}
		l.out = Collector[Out]{buf: make([]Out, 0, j.opts.BatchSize), next: out.(consumer[Out])}
		return l, l
	}
	maxPar := j.opts.MaxParallelism
	connect[In](ks.node, n, partHash, func() func(In, int) int {
		var buf []byte
		return func(v In, p int) int {
			buf = codec.Append(buf[:0], key(v))
			return state.SubtaskForGroup(maxPar, p, state.KeyGroupOf(buf, maxPar))
		}
	})
	return Stream[Out]{job: j, node: n}
}

// Reduce keeps one value per key, folding every record into it with f, and
// emits the new value for every record (a running aggregate).
func Reduce[K comparable, T any](ks KeyedStream[K, T], name string, f func(acc, v T) T, vc state.Codec[T], opts ...NodeOption) Stream[T] {
	if vc == nil {
		vc = state.CodecFor[T]()
	}
	kc := ks.codec
	return Process(ks, name, func() KeyedProcessor[K, T, T] { return &reducer[K, T]{f: f, kc: kc, vc: vc} }, opts...)
}

// Union merges streams of one type.
func Union[T any](name string, streams ...Stream[T]) Stream[T] {
	if len(streams) == 0 {
		panic("runtime: Union of no streams")
	}
	j := streams[0].job
	n := j.addNode(name, nil, &node{})
	typedNode[T, T](n)
	n.instantiate = func(out any) (link, any) {
		l := &passLink[T]{out: out.(consumer[T])}
		return l, l
	}
	for _, s := range streams {
		connect[T](s.node, n, partForward, nil)
	}
	return Stream[T]{job: j, node: n}
}

// Rebalance redistributes s round-robin over the next operator's subtasks.
func Rebalance[T any](s Stream[T], name string, opts ...NodeOption) Stream[T] {
	return repartition(s, name, partRebalance, nil, opts)
}

// Broadcast sends every record of s to every subtask of the next operator.
func Broadcast[T any](s Stream[T], name string, opts ...NodeOption) Stream[T] {
	return repartition(s, name, partBroadcast, nil, opts)
}

// PartitionBy routes each record to subtask partition(v) mod parallelism of
// the next operator. Sinks of a bucketed table use it with the bucket, so
// writer i of p owns the buckets b with b mod p = i. newPartition is called
// once per upstream subtask, so the function it returns may keep scratch
// memory without locking.
func PartitionBy[T any](s Stream[T], name string, newPartition func() func(T) int, opts ...NodeOption) Stream[T] {
	return repartition(s, name, partCustom, func() func(T, int) int {
		partition := newPartition()
		return func(v T, p int) int { return base.Owner(partition(v), p) }
	}, opts)
}

func repartition[T any](s Stream[T], name string, kind partKind, part func() func(T, int) int, opts []NodeOption) Stream[T] {
	j := s.job
	n := j.addNode(name, opts, &node{})
	typedNode[T, T](n)
	n.instantiate = func(out any) (link, any) {
		l := &passLink[T]{out: out.(consumer[T])}
		return l, l
	}
	connect[T](s.node, n, kind, part)
	return Stream[T]{job: j, node: n}
}

// SinkTo adds a sink reading s.
func SinkTo[T any](s Stream[T], name string, sink func() Sink[T], opts ...NodeOption) {
	j := s.job
	n := j.addNode(name, opts, &node{})
	typedNode[T, struct{}](n)
	n.discard = nil
	n.instantiate = func(any) (link, any) {
		l := &sinkLink[T]{sink: sink()}
		return l, l
	}
	connect[T](s.node, n, partForward, nil)
}
