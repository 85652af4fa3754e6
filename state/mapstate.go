package state

import (
	"encoding/binary"
	"fmt"
)

// Map holds per key a map from user keys UK to values UV. Each user entry is
// its own backend key, so flushing a change to a large map writes only the
// changed entries:
//
//	[state prefix][uvarint len(encoded key)][encoded key][encoded user key]
//
// A key's whole map is loaded into the cache (one prefix scan) the first time
// it is used.
type Map[K comparable, UK comparable, UV any] struct {
	kd        *Keyed
	name      string
	kc        Codec[K]
	ukc       Codec[UK]
	uvc       Codec[UV]
	m         map[K]*userMap[UK, UV]
	dirtyKeys []dirtyKey[K, UK, UV]
}

type dirtyKey[K comparable, UK comparable, UV any] struct {
	k  K
	um *userMap[UK, UV]
}

// userMap is the cached map of one key. dirty names the user keys put or
// deleted since the last flush; it is nil when the key is clean.
type userMap[UK comparable, UV any] struct {
	m     map[UK]UV
	dirty map[UK]struct{}
}

// NewMap registers a map state called name on kd.
func NewMap[K comparable, UK comparable, UV any](kd *Keyed, name string, kc Codec[K], ukc Codec[UK], uvc Codec[UV]) *Map[K, UK, UV] {
	s := &Map[K, UK, UV]{kd: kd, name: name, kc: kc, ukc: ukc, uvc: uvc, m: map[K]*userMap[UK, UV]{}}
	kd.register(name, s)
	return s
}

// Get returns the value of user key uk in the map of k.
func (s *Map[K, UK, UV]) Get(k K, uk UK) (UV, bool, error) {
	um, err := s.userMap(k)
	if err != nil {
		var zero UV
		return zero, false, err
	}
	v, ok := um.m[uk]
	return v, ok, nil
}

// Put sets user key uk to v in the map of k.
func (s *Map[K, UK, UV]) Put(k K, uk UK, v UV) error {
	um, err := s.userMap(k)
	if err != nil {
		return err
	}
	if _, ok := um.m[uk]; !ok {
		evicted, err := s.kd.reserve(1)
		if err != nil {
			return err
		}
		if evicted {
			if um, err = s.userMap(k); err != nil {
				return err
			}
		}
	}
	um.m[uk] = v
	s.markDirty(k, um, uk)
	return nil
}

// Delete removes user key uk from the map of k.
func (s *Map[K, UK, UV]) Delete(k K, uk UK) error {
	um, err := s.userMap(k)
	if err != nil {
		return err
	}
	if _, ok := um.m[uk]; ok {
		delete(um.m, uk)
		s.kd.entries--
		s.markDirty(k, um, uk)
	}
	return nil
}

// Clear removes every user key of k.
func (s *Map[K, UK, UV]) Clear(k K) error {
	um, err := s.userMap(k)
	if err != nil {
		return err
	}
	for uk := range um.m {
		s.markDirty(k, um, uk)
	}
	s.kd.entries -= len(um.m)
	clear(um.m)
	return nil
}

// Range calls fn for every user entry of k, in no particular order, until fn
// returns false. fn must not modify s.
func (s *Map[K, UK, UV]) Range(k K, fn func(uk UK, v UV) bool) error {
	um, err := s.userMap(k)
	if err != nil {
		return err
	}
	for uk, v := range um.m {
		if !fn(uk, v) {
			break
		}
	}
	return nil
}

// Len returns the number of user entries of k.
func (s *Map[K, UK, UV]) Len(k K) (int, error) {
	um, err := s.userMap(k)
	if err != nil {
		return 0, err
	}
	return len(um.m), nil
}

func (s *Map[K, UK, UV]) markDirty(k K, um *userMap[UK, UV], uk UK) {
	if um.dirty == nil {
		um.dirty = map[UK]struct{}{}
		s.dirtyKeys = append(s.dirtyKeys, dirtyKey[K, UK, UV]{k, um})
	}
	um.dirty[uk] = struct{}{}
}

// appendKeyPrefix appends the backend prefix of k's entries and returns it
// with the key group.
func (s *Map[K, UK, UV]) appendKeyPrefix(dst []byte, k K) ([]byte, int, error) {
	enc, g, err := encodeKey(s.kd, s.kc, k)
	if err != nil {
		return nil, 0, fmt.Errorf("state %q: %w", s.name, err)
	}
	dst = AppendStatePrefix(dst, g, s.name)
	dst = binary.AppendUvarint(dst, uint64(len(enc)))
	return append(dst, enc...), g, nil
}

// userMap returns the cached map of k, loading it on a miss.
func (s *Map[K, UK, UV]) userMap(k K) (*userMap[UK, UV], error) {
	if um, ok := s.m[k]; ok {
		return um, nil
	}
	prefix, _, err := s.appendKeyPrefix(nil, k)
	if err != nil {
		return nil, err
	}
	um := &userMap[UK, UV]{m: map[UK]UV{}}
	err = s.kd.backend.Scan(prefix, func(key, val []byte) error {
		uk, err := s.ukc.Decode(key[len(prefix):])
		if err != nil {
			return fmt.Errorf("user key: %w", err)
		}
		v, err := s.uvc.Decode(val)
		if err != nil {
			return fmt.Errorf("value of user key %v: %w", uk, err)
		}
		um.m[uk] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state %q: load map of %v: %w", s.name, k, err)
	}
	if _, err := s.kd.reserve(1 + len(um.m)); err != nil {
		return nil, err
	}
	s.m[k] = um
	return um, nil
}

func (s *Map[K, UK, UV]) appendDirty(kd *Keyed) error {
	for _, d := range s.dirtyKeys {
		um := d.um
		start := len(kd.buf)
		var err error
		if kd.buf, _, err = s.appendKeyPrefix(kd.buf, d.k); err != nil {
			return err
		}
		prefixEnd := len(kd.buf)
		for uk := range um.dirty {
			kd.buf = append(kd.buf, kd.buf[start:prefixEnd]...)
			keyStart := len(kd.buf) - (prefixEnd - start)
			kd.buf = s.ukc.Append(kd.buf, uk)
			key := kd.buf[keyStart:len(kd.buf):len(kd.buf)]
			v, ok := um.m[uk]
			if !ok {
				kd.batch.Del(key)
				continue
			}
			vStart := len(kd.buf)
			kd.buf = s.uvc.Append(kd.buf, v)
			kd.batch.Put(key, kd.buf[vStart:len(kd.buf):len(kd.buf)])
		}
	}
	return nil
}

func (s *Map[K, UK, UV]) markClean() {
	for _, d := range s.dirtyKeys {
		d.um.dirty = nil
	}
	clear(s.dirtyKeys)
	s.dirtyKeys = s.dirtyKeys[:0]
}

func (s *Map[K, UK, UV]) evict(n int) int {
	freed := 0
	for k, um := range s.m {
		if freed >= n {
			break
		}
		if um.dirty == nil {
			delete(s.m, k)
			freed += 1 + len(um.m)
		}
	}
	return freed
}
