package kafka

import (
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// NormalizeChanges keys decoded changelog changes by their record key and
// turns them into exact changes (see Normalizer), with the last row of
// every key in checkpointed keyed state, so that a job reading an
// upsert-json changelog retracts the right old row (-U, -D) also after a
// restore or a rescale. Keys are compared as written (the exporter always
// writes a key the same way). Changes that change nothing are dropped.
func NormalizeChanges(s runtime.Stream[Change], name string, opts ...runtime.NodeOption) runtime.Stream[Change] {
	ks := runtime.KeyBy(s, func(c Change) string { return string(c.RawKey) }, state.StringCodec{})
	return runtime.Process(ks, name, func() runtime.KeyedProcessor[string, Change, Change] { return &normalizer{} }, opts...)
}

type normalizer struct {
	last *state.Value[string, Row]
}

func (n *normalizer) Open(_ *runtime.Context, keyed *state.Keyed) error {
	n.last = state.NewValue(keyed, "last-row", state.StringCodec{}, state.Codec[Row](rowCodec{}))
	return nil
}

func (n *normalizer) Process(_ string, c Change, out *runtime.Collector[Change]) error {
	c, ok, err := normalizeChange(stateMemory{n.last}, c)
	if ok {
		out.Emit(c)
	}
	return err
}

func (n *normalizer) Close() error { return nil }

// stateMemory keeps the rows in a keyed value state.
type stateMemory struct{ v *state.Value[string, Row] }

func (m stateMemory) get(k string) (Row, bool, error) { return m.v.Get(k) }
func (m stateMemory) put(k string, r Row) error       { return m.v.Put(k, r.Clone()) }
func (m stateMemory) del(k string) error              { return m.v.Delete(k) }

// rowCodec stores a Row as its JSON.
type rowCodec struct{}

func (rowCodec) Append(dst []byte, r Row) []byte { return appendObject(dst, r.fields) }

func (rowCodec) Decode(src []byte) (Row, error) {
	d := rowDecoder{oneShot: true}
	return d.decode(src)
}
