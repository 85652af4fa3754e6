package state

import (
	"bytes"
	"testing"
)

// TestRangeFor checks that for every parallelism up to max every group is
// owned by exactly one subtask, and SubtaskForGroup agrees with RangeFor.
func TestRangeFor(t *testing.T) {
	for _, maxPar := range []int{1, 7, DefaultMaxParallelism} {
		for p := 1; p <= maxPar; p++ {
			owners := make([]int, maxPar)
			for i := range p {
				r := RangeFor(maxPar, p, i)
				if r.Empty() {
					t.Errorf("max %d p %d: subtask %d owns no group", maxPar, p, i)
				}
				for g := r.Start; g < r.End; g++ {
					owners[g]++
					if s := SubtaskForGroup(maxPar, p, g); s != i {
						t.Errorf("max %d p %d: SubtaskForGroup(%d) = %d, RangeFor says %d", maxPar, p, g, s, i)
					}
				}
			}
			for g, n := range owners {
				if n != 1 {
					t.Errorf("max %d p %d: group %d owned %d times", maxPar, p, g, n)
				}
			}
		}
	}
}

func TestKeyGroupOf(t *testing.T) {
	// xxhash64("") = 0xef46db3751d8e999, a published test vector.
	if g := KeyGroupOf(nil, 1000); g != int(uint64(0xef46db3751d8e999)%1000) {
		t.Errorf("KeyGroupOf(empty, 1000) = %d", g)
	}
	counts := make([]int, 16)
	for i := range 16000 {
		counts[KeyGroupOf(Int64Codec{}.Append(nil, int64(i)), 16)]++
	}
	for g, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("group %d got %d of 16000 keys, want about 1000", g, n)
		}
	}
}

func TestBackendKey(t *testing.T) {
	k := AppendBackendKey(nil, 300, "sum", []byte("user"))
	if want := []byte("\x01\x2c\x03sumuser"); !bytes.Equal(k, want) {
		t.Fatalf("backend key = %q, want %q", k, want)
	}
	g, name, uk, err := ParseBackendKey(k)
	if err != nil || g != 300 || string(name) != "sum" || string(uk) != "user" {
		t.Errorf("ParseBackendKey = %d %q %q %v", g, name, uk, err)
	}
	for _, bad := range [][]byte{nil, {0, 1}, {0, 1, 5, 'a'}} {
		if _, _, _, err := ParseBackendKey(bad); err == nil {
			t.Errorf("ParseBackendKey(%x) succeeded", bad)
		}
	}
	lo, hi := GroupBounds(KeyGroupRange{Start: 300, End: 301})
	if !(bytes.Compare(lo, k) <= 0 && bytes.Compare(k, hi) < 0) {
		t.Errorf("key of group 300 outside bounds %x..%x", lo, hi)
	}
	if _, hi := GroupBounds(KeyGroupRange{Start: 0, End: MaxKeyGroups}); hi != nil {
		t.Errorf("upper bound of the last group = %x, want nil", hi)
	}
}
