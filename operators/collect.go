package operators

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// CollectSink is a two-phase committing sink that appends records to files
// in a folder: at each barrier it stages what it received since the last
// one in a durable file, and when the checkpoint completes it commits the
// staged files by renaming them into dir/committed. Committing is idempotent
// and is finished from restored state after a crash, so the committed files
// hold every record exactly once when the job is exactly-once. Tests and
// examples use it to prove that without Kafka.
//
// Files are named txn-<checkpoint>-<subtask>; a record is a uvarint length
// and the codec's bytes.
type CollectSink[T any] struct {
	dir     string
	codec   state.Codec[T]
	subtask int
	pending []byte   // encoded records since the last barrier
	staged  []staged // staged, not yet known committed
}

type staged struct {
	id   barrier.CheckpointID
	name string
}

const stagedList = "staged"

// NewCollectSink returns a factory of collecting sinks writing under dir.
func NewCollectSink[T any](dir string, codec state.Codec[T]) func() runtime.Sink[T] {
	if codec == nil {
		codec = state.CodecFor[T]()
	}
	return func() runtime.Sink[T] { return &CollectSink[T]{dir: dir, codec: codec} }
}

func (s *CollectSink[T]) stagingDir() string   { return filepath.Join(s.dir, "staging") }
func (s *CollectSink[T]) committedDir() string { return filepath.Join(s.dir, "committed") }

func (s *CollectSink[T]) Open(ctx *runtime.Context) error {
	s.subtask = ctx.Subtask
	for _, d := range []string{s.stagingDir(), s.committedDir()} {
		if err := state.MkdirSync(d); err != nil {
			return err
		}
	}
	for _, item := range ctx.State.Lists[stagedList] {
		id, n := binary.Uvarint(item)
		if n <= 0 || n == len(item) {
			return fmt.Errorf("restore staged transaction: %w", state.ErrCorrupt)
		}
		s.staged = append(s.staged, staged{id: barrier.CheckpointID(id), name: string(item[n:])})
	}
	if ctx.RestoredOK {
		// The restored checkpoint completed: what it staged is committed.
		if err := s.commit(ctx.Restored); err != nil {
			return err
		}
	}
	if ctx.Subtask == 0 {
		// Subtasks open one after the other before any runs, so staging
		// files newer than the restored checkpoint are leftovers of
		// transactions that never completed: abort them.
		return s.abortLeftovers(ctx)
	}
	return nil
}

func (s *CollectSink[T]) abortLeftovers(ctx *runtime.Context) error {
	ents, err := os.ReadDir(s.stagingDir())
	if err != nil {
		return fmt.Errorf("list staging: %w", err)
	}
	for _, e := range ents {
		id, _, ok := parseTxn(e.Name())
		if ok && (!ctx.RestoredOK || id > ctx.Restored) {
			if err := os.Remove(filepath.Join(s.stagingDir(), e.Name())); err != nil {
				return fmt.Errorf("abort staged %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

func (s *CollectSink[T]) Write(batch []T) error {
	var tmp []byte
	for _, v := range batch {
		tmp = s.codec.Append(tmp[:0], v)
		s.pending = binary.AppendUvarint(s.pending, uint64(len(tmp)))
		s.pending = append(s.pending, tmp...)
	}
	return nil
}

func (s *CollectSink[T]) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if len(s.pending) > 0 {
		name := fmt.Sprintf("txn-%d-%d", id, s.subtask)
		data := s.pending
		if _, _, err := state.WriteFileAtomic(filepath.Join(s.stagingDir(), name), func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		}); err != nil {
			return state.OperatorState{}, fmt.Errorf("stage transaction %s: %w", name, err)
		}
		s.staged = append(s.staged, staged{id: id, name: name})
		s.pending = s.pending[:0]
	}
	items := make([][]byte, len(s.staged))
	for i, st := range s.staged {
		items[i] = append(binary.AppendUvarint(nil, uint64(st.id)), st.name...)
	}
	return state.OperatorState{Lists: map[string][][]byte{stagedList: items}}, nil
}

func (s *CollectSink[T]) NotifyComplete(id barrier.CheckpointID) error { return s.commit(id) }

// commit moves every staged file up to id into the committed folder. A file
// already moved (by an earlier attempt) is skipped.
func (s *CollectSink[T]) commit(id barrier.CheckpointID) error {
	keep := s.staged[:0]
	moved := false
	for _, st := range s.staged {
		if st.id > id {
			keep = append(keep, st)
			continue
		}
		err := os.Rename(filepath.Join(s.stagingDir(), st.name), filepath.Join(s.committedDir(), st.name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("commit %s: %w", st.name, err)
		}
		if err == nil {
			moved = true
		} else if _, serr := os.Stat(filepath.Join(s.committedDir(), st.name)); serr != nil {
			return fmt.Errorf("commit %s: staged file lost: %w", st.name, err)
		}
	}
	s.staged = keep
	if moved {
		return state.SyncDir(s.committedDir())
	}
	return nil
}

func (s *CollectSink[T]) Close() error { return nil }

func parseTxn(name string) (barrier.CheckpointID, int, bool) {
	rest, ok := strings.CutPrefix(name, "txn-")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	id, err1 := strconv.ParseUint(a, 10, 64)
	sub, err2 := strconv.Atoi(b)
	return barrier.CheckpointID(id), sub, err1 == nil && err2 == nil
}

// ReadCommitted returns every committed record under dir, transaction by
// transaction in checkpoint then subtask order.
func ReadCommitted[T any](dir string, codec state.Codec[T]) ([]T, error) {
	if codec == nil {
		codec = state.CodecFor[T]()
	}
	cdir := filepath.Join(dir, "committed")
	ents, err := os.ReadDir(cdir)
	if err != nil {
		return nil, fmt.Errorf("read committed: %w", err)
	}
	type txn struct {
		id   barrier.CheckpointID
		sub  int
		name string
	}
	var txns []txn
	for _, e := range ents {
		if id, sub, ok := parseTxn(e.Name()); ok {
			txns = append(txns, txn{id, sub, e.Name()})
		}
	}
	sort.Slice(txns, func(i, j int) bool {
		if txns[i].id != txns[j].id {
			return txns[i].id < txns[j].id
		}
		return txns[i].sub < txns[j].sub
	})
	var out []T
	for _, t := range txns {
		f, err := os.Open(filepath.Join(cdir, t.name))
		if err != nil {
			return nil, fmt.Errorf("read committed %s: %w", t.name, err)
		}
		r := bufio.NewReader(f)
		for {
			n, err := binary.ReadUvarint(r)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("read committed %s: %w", t.name, err)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				f.Close()
				return nil, fmt.Errorf("read committed %s: %w", t.name, err)
			}
			v, err := codec.Decode(b)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("decode committed %s: %w", t.name, err)
			}
			out = append(out, v)
		}
		f.Close()
	}
	return out, nil
}
