package barrier

import (
	"fmt"
	"time"
)

// CheckpointID names one checkpoint of one job. Ids grow strictly; the first
// checkpoint of a fresh job has id 0 and is taken before any record (the
// baseline that exactly-once sinks need), a restored job continues after the
// id it was restored from.
type CheckpointID uint64

func (id CheckpointID) String() string { return fmt.Sprintf("chk-%d", id) }

// Barrier marks, in a stream, the point that checkpoint ID is taken at.
type Barrier struct {
	ID CheckpointID
	// Time is when the coordinator triggered the checkpoint.
	Time time.Time
	// Final marks the checkpoint of a graceful stop: sources emit nothing
	// after it and the job ends once it completes.
	Final bool
	// Initial marks the first checkpoint of a fresh start, which sources
	// take before reading any record.
	Initial bool
}

func (b Barrier) String() string {
	if b.Final {
		return fmt.Sprintf("barrier(%d, final)", b.ID)
	}
	return fmt.Sprintf("barrier(%d)", b.ID)
}

// Cancel tells downstream subtasks that checkpoint ID was aborted upstream,
// so they stop aligning for it instead of waiting for barriers that will not
// come.
type Cancel struct {
	ID CheckpointID
}

// Mode selects how a subtask with several inputs treats barriers.
type Mode uint8

const (
	// ExactlyOnce blocks each input that delivered barrier N until N arrived
	// on every input (aligned checkpoints).
	ExactlyOnce Mode = iota
	// AtLeastOnce never blocks: records after barrier N on a fast input may be
	// processed before the snapshot, so they are replayed after a restore.
	AtLeastOnce
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly_once"
	case AtLeastOnce:
		return "at_least_once"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}
