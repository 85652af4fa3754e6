package build

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// lanesUnion names the datagen positions in checkpoints.
const lanesUnion = "datagen-lanes"

// DatagenLane is one share of a datagen's records: lane l of L makes
// records l, l+L, l+2L, ...; Next is the next one. A fresh job has one lane
// per subtask; a restore at another parallelism deals the lanes out again.
type DatagenLane struct {
	ID   int64 `json:"id"`
	Of   int64 `json:"of"`
	Next int64 `json:"next"`
}

// genSource is one subtask of a datagen source that feeds the job
// directly.
type genSource struct {
	gen   *pipelines.Generator
	rate  float64 // records/s over all subtasks; 0: no limit
	count int64   // 0: endless
	lanes []DatagenLane
	share float64 // this subtask's part of rate
	start time.Time
	made  int64
	next  int // the lane to take from next
}

func newGenSource(gen *pipelines.Generator, d *pipelines.DatagenSource) func() runtime.Source[Row] {
	return func() runtime.Source[Row] { return &genSource{gen: gen, rate: d.Rate, count: d.Count} }
}

func (s *genSource) Open(ctx *runtime.Context) error {
	items := ctx.State.Unions[lanesUnion]
	if !ctx.RestoredOK || items == nil {
		s.lanes = []DatagenLane{{ID: int64(ctx.Subtask), Of: int64(ctx.Parallelism), Next: int64(ctx.Subtask)}}
	}
	total := len(items)
	for _, item := range items {
		var l DatagenLane
		if err := json.Unmarshal(item, &l); err != nil {
			return fmt.Errorf("%w: datagen position: %v", runtime.ErrRestore, err)
		}
		if int(l.ID)%ctx.Parallelism == ctx.Subtask {
			s.lanes = append(s.lanes, l)
		}
	}
	if total == 0 {
		total = ctx.Parallelism
	}
	s.share = float64(len(s.lanes)) / float64(total)
	s.start = time.Now()
	return nil
}

func (s *genSource) Read(buf []Row) ([]Row, error) {
	room := cap(buf) - len(buf)
	if s.rate > 0 {
		due := int64(time.Since(s.start).Seconds()*s.rate*s.share) + 1 - s.made
		if due <= 0 {
			time.Sleep(min(time.Duration(float64(time.Second)/(s.rate*max(s.share, 1e-9))), 20*time.Millisecond))
			return buf, nil
		}
		room = int(min(int64(room), due))
	}
	for range room {
		l := s.take()
		if l == nil {
			break
		}
		buf = append(buf, s.gen.Row(l.Next))
		l.Next += l.Of
		s.made++
	}
	if len(buf) == 0 && s.take() == nil {
		return buf, io.EOF
	}
	return buf, nil
}

// take returns the next lane with records left, round robin, or nil.
func (s *genSource) take() *DatagenLane {
	for range s.lanes {
		l := &s.lanes[s.next]
		s.next = (s.next + 1) % len(s.lanes)
		if s.count == 0 || l.Next < s.count {
			return l
		}
	}
	return nil
}

func (s *genSource) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	items := make([][]byte, len(s.lanes))
	for i, l := range s.lanes {
		b, err := json.Marshal(l)
		if err != nil {
			return state.OperatorState{}, err
		}
		items[i] = b
	}
	return state.OperatorState{Unions: map[string][][]byte{lanesUnion: items}}, nil
}

func (s *genSource) NotifyComplete(barrier.CheckpointID) error { return nil }
func (s *genSource) Close() error                              { return nil }
