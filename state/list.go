package state

import (
	"encoding/binary"
	"fmt"
)

// List holds a list of V per key, stored as one backend value.
type List[K comparable, V any] struct {
	t *table[K, []V]
}

// NewList registers a list state called name on kd.
func NewList[K comparable, V any](kd *Keyed, name string, kc Codec[K], vc Codec[V]) *List[K, V] {
	return &List[K, V]{t: newTable[K, []V](kd, name, kc, listCodec[V]{vc})}
}

// Add appends v to the list of k.
func (s *List[K, V]) Add(k K, v V) error {
	vs, _, err := s.t.get(k)
	if err != nil {
		return err
	}
	return s.t.set(k, append(vs, v), true)
}

// Get returns the list of k (nil when empty). The slice belongs to the cache:
// the caller must not modify it, and it is valid until the next call on s.
func (s *List[K, V]) Get(k K) ([]V, error) {
	vs, _, err := s.t.get(k)
	return vs, err
}

// Clear empties the list of k.
func (s *List[K, V]) Clear(k K) error { return s.t.set(k, nil, false) }

// listCodec stores a list as (uvarint length, element) pairs.
type listCodec[V any] struct{ c Codec[V] }

func (l listCodec[V]) Append(dst []byte, vs []V) []byte {
	for _, v := range vs {
		// Reserve the largest uvarint length for the element, then shift it
		// down once its size is known.
		lenAt := len(dst)
		dst = append(dst, make([]byte, binary.MaxVarintLen64)...)
		dst = l.c.Append(dst, v)
		n := len(dst) - lenAt - binary.MaxVarintLen64
		w := binary.PutUvarint(dst[lenAt:], uint64(n))
		copy(dst[lenAt+w:], dst[lenAt+binary.MaxVarintLen64:])
		dst = dst[:lenAt+w+n]
	}
	return dst
}

func (l listCodec[V]) Decode(src []byte) ([]V, error) {
	var vs []V
	for len(src) > 0 {
		field, rest, ok := cutUvarintBytes(src)
		if !ok {
			return nil, fmt.Errorf("decode list element %d: %w", len(vs), ErrCorrupt)
		}
		v, err := l.c.Decode(field)
		if err != nil {
			return nil, fmt.Errorf("decode list element %d: %w", len(vs), err)
		}
		vs = append(vs, v)
		src = rest
	}
	return vs, nil
}
