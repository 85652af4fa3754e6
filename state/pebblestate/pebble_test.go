package pebblestate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/state/statetest"
)

func TestPebbleBackend(t *testing.T) { statetest.Run(t, NewFactory(Options{})) }

func BenchmarkPebbleBackend(b *testing.B) { statetest.Bench(b, NewFactory(Options{})) }

// TestCorruptFileIsAnError flips bytes in the working DB's sstable: the
// read returns state.ErrCorrupt instead of pebble's fatal logger panicking.
func TestCorruptFileIsAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "work")
	kb, err := NewFactory(Options{}).OpenKeyed(state.KeyedSpec{Dir: dir, KeyGroups: state.KeyGroupRange{Start: 0, End: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	var wb state.WriteBatch
	for i := range 2000 {
		wb.Ops = append(wb.Ops, state.WriteOp{Key: fmt.Appendf(nil, "key%06d", i), Value: bytes.Repeat([]byte{byte(i)}, 40)})
	}
	if err := kb.Apply(&wb); err != nil {
		t.Fatal(err)
	}
	if err := kb.(*backend).db.Flush(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sstable")
	}
	raw, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 64; i < len(raw)/2; i += 7 {
		raw[i] ^= 0xff
	}
	if err := os.WriteFile(ssts[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = kb.Get([]byte("key000010"))
	if !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("get from a corrupt sstable: %v, want state.ErrCorrupt", err)
	}
}
