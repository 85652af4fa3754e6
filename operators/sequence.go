package operators

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// Event is a record of the sequence source.
type Event struct {
	Seq   uint64 // position in the whole sequence, unique
	Key   uint64 // Seq's key, in [0, Keys)
	Value int64  // a deterministic function of Seq
	// Time is the event time (Unix ns) SequenceConfig.EventTime or TimeStep
	// gave Seq.
	Time int64 `json:",omitempty"`
}

// SequenceConfig configures a deterministic sequence source.
type SequenceConfig struct {
	// Splits is the number of independent sub-sequences (8): split j yields
	// Seq = j, j+Splits, j+2*Splits, ... Splits are spread over the source's
	// subtasks and their positions are checkpointed, like Kafka partitions.
	Splits int
	// Count is the length of the sequence; 0 means unbounded.
	Count uint64
	// Keys is the number of distinct keys (100).
	Keys uint64
	// Rate limits each subtask to this many records per second (0: no limit).
	Rate float64
	// EventTime, if set, gives each record its event time (Event.Time, Unix
	// ns) from its Seq, and makes the source a runtime.WatermarkSource: each
	// split's watermark is its largest event time minus MaxOutOfOrderness,
	// and a split without records for IdleTimeout (0: never) is idle.
	EventTime func(seq uint64) int64
	// TimeStep, if EventTime is nil, gives record Seq the event time
	// Seq × TimeStep, with the same watermarks: a steady clock read off the
	// record, which costs what reading a Kafka record's timestamp does (no
	// call per record, as EventTime is).
	TimeStep          time.Duration
	MaxOutOfOrderness time.Duration
	IdleTimeout       time.Duration
}

// timed reports whether the records have event times (and the source
// watermarks).
func (cfg SequenceConfig) timed() bool { return cfg.EventTime != nil || cfg.TimeStep > 0 }

// ValueOf is the Value of sequence number seq.
func ValueOf(seq uint64) int64 { return int64(seq%1000) + 1 }

// KeyOf is the Key of sequence number seq, for keys distinct keys.
func KeyOf(seq, keys uint64) uint64 { return (seq * 2654435761) % keys }

const splitsList = "splits"

// NewSequence returns a factory of sequence sources. Replaying from a
// checkpoint yields exactly the same records after it, whatever the
// parallelism, which is what exactly-once tests need.
func NewSequence(cfg SequenceConfig) func() runtime.Source[Event] {
	if cfg.Splits <= 0 {
		cfg.Splits = 8
	}
	if cfg.Keys == 0 {
		cfg.Keys = 100
	}
	if cfg.timed() {
		return func() runtime.Source[Event] { return &timedSequence{sequence{cfg: cfg}} }
	}
	return func() runtime.Source[Event] { return &sequence{cfg: cfg} }
}

type split struct {
	id   uint64 // split number
	next uint64 // index of the next record within the split
	wm   *watermark.Split
}

type sequence struct {
	cfg     SequenceConfig
	splits  []split
	rr      int
	start   time.Time
	emitted float64
	wms     *watermark.Splits // with event time
}

func (s *sequence) Open(ctx *runtime.Context) error {
	s.start = time.Now()
	if s.cfg.timed() {
		s.wms = watermark.NewSplits(s.cfg.MaxOutOfOrderness, s.cfg.IdleTimeout)
	}
	add := func(sp split, max int64) {
		if s.wms != nil {
			sp.wm = s.wms.Add(max, s.start)
		}
		s.splits = append(s.splits, sp)
	}
	if ctx.RestoredOK {
		for _, item := range ctx.State.Lists[splitsList] {
			// 16 bytes: id, next; 24: and the largest event time read
			if len(item) != 16 && len(item) != 24 {
				return fmt.Errorf("restore sequence split: %d bytes, want 16 or 24: %w", len(item), state.ErrCorrupt)
			}
			max := watermark.Min
			if len(item) == 24 {
				max = int64(binary.BigEndian.Uint64(item[16:]))
			}
			add(split{id: binary.BigEndian.Uint64(item), next: binary.BigEndian.Uint64(item[8:])}, max)
		}
	} else {
		for j := ctx.Subtask; j < s.cfg.Splits; j += ctx.Parallelism {
			add(split{id: uint64(j)}, watermark.Min)
		}
	}
	return nil
}

func (s *sequence) seq(sp split) uint64 { return sp.id + sp.next*uint64(s.cfg.Splits) }

func (s *sequence) done(sp split) bool { return s.cfg.Count > 0 && s.seq(sp) >= s.cfg.Count }

func (s *sequence) Read(buf []Event) ([]Event, error) {
	if s.finished() {
		return buf, io.EOF
	}
	room := cap(buf) - len(buf)
	if s.cfg.Rate > 0 {
		allowed := s.cfg.Rate*time.Since(s.start).Seconds() - s.emitted
		if allowed < 1 {
			// At least a microsecond: a wait rounded down to 0 would not
			// sleep, and a clock that moves only while goroutines sleep
			// (testing/synctest) would never let the next record due.
			time.Sleep(min(10*time.Millisecond, max(time.Microsecond, time.Duration((1-allowed)/s.cfg.Rate*float64(time.Second)))))
			return buf, nil
		}
		room = min(room, int(allowed))
	}
	for range s.splits {
		if room == 0 {
			break
		}
		// one run per split per call keeps splits interleaved
		sp := &s.splits[s.rr]
		s.rr = (s.rr + 1) % len(s.splits)
		// The run's largest event time goes to the split's tracker once,
		// not per record.
		timeOf, step, top, n := s.cfg.EventTime, int64(s.cfg.TimeStep), watermark.Min, 0
		for ; n < 64 && room > 0 && !s.done(*sp); n++ {
			seq := s.seq(*sp)
			e := Event{Seq: seq, Key: KeyOf(seq, s.cfg.Keys), Value: ValueOf(seq)}
			switch {
			case timeOf != nil:
				e.Time = timeOf(seq)
				top = max(top, e.Time)
			case step > 0:
				e.Time = int64(seq) * step
				top = max(top, e.Time)
			}
			buf = append(buf, e)
			sp.next++
			room--
		}
		s.emitted += float64(n)
		if sp.wm != nil && n > 0 {
			sp.wm.Observe(top)
		}
	}
	if s.finished() {
		return buf, io.EOF
	}
	return buf, nil
}

func (s *sequence) finished() bool {
	for _, sp := range s.splits {
		if !s.done(sp) {
			return false
		}
	}
	return true
}

func (s *sequence) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	items := make([][]byte, len(s.splits))
	for i, sp := range s.splits {
		b := binary.BigEndian.AppendUint64(make([]byte, 0, 24), sp.id)
		b = binary.BigEndian.AppendUint64(b, sp.next)
		if sp.wm != nil {
			b = binary.BigEndian.AppendUint64(b, uint64(sp.wm.Max()))
		}
		items[i] = b
	}
	return state.OperatorState{Lists: map[string][][]byte{splitsList: items}}, nil
}

// timedSequence is a sequence with event time: a runtime.WatermarkSource.
type timedSequence struct{ sequence }

func (s *timedSequence) Watermark(now time.Time) (int64, bool) { return s.wms.Current(now) }

func (s *sequence) NotifyComplete(barrier.CheckpointID) error { return nil }
func (s *sequence) Close() error                              { return nil }
