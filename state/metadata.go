package state

import (
	"time"

	"github.com/ebbflow/ebbflow/barrier"
)

// MetadataFile is the name of the file that makes a checkpoint folder a
// completed checkpoint. It is written last, atomically.
const MetadataFile = "_metadata"

// Metadata describes a completed checkpoint: what every operator subtask
// saved. It is stored as JSON with a checksum in the checkpoint folder.
type Metadata struct {
	Version        int                  `json:"version"`
	Job            string               `json:"job"`
	ID             barrier.CheckpointID `json:"id"`
	Time           time.Time            `json:"time"`
	Final          bool                 `json:"final,omitempty"`
	MaxParallelism int                  `json:"max_parallelism"`
	// Operators maps an operator's uid to its subtasks' snapshots.
	Operators map[string]OperatorSnapshot `json:"operators"`
}

// OperatorSnapshot is the state of every subtask of one operator.
type OperatorSnapshot struct {
	Parallelism int               `json:"parallelism"`
	Subtasks    []SubtaskSnapshot `json:"subtasks"`
}

// SubtaskSnapshot is what one subtask saved at a checkpoint.
type SubtaskSnapshot struct {
	Subtask int `json:"subtask"`
	// KeyGroups and Files describe keyed state (empty for operators without).
	KeyGroups KeyGroupRange `json:"key_groups"`
	Files     []File        `json:"files,omitempty"`
	// Lists are redistributed round-robin on restore; Unions go whole to
	// every new subtask.
	Lists  map[string][][]byte `json:"lists,omitempty"`
	Unions map[string][][]byte `json:"unions,omitempty"`
}

// OperatorState is the operator state a subtask gets back on restore.
type OperatorState struct {
	Lists  map[string][][]byte
	Unions map[string][][]byte
}
