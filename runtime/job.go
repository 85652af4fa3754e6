package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a job. Zero values take the defaults noted.
type Options struct {
	// Name identifies the job: its checkpoints and state live under
	// DataDir/jobs/Name. Required.
	Name string
	// DataDir holds checkpoints and state. Empty: a temporary folder removed
	// when Run returns (nothing survives the process).
	DataDir string
	// Parallelism is the default number of subtasks per operator (1).
	Parallelism int
	// MaxParallelism is the number of key groups (state.DefaultMaxParallelism).
	// It cannot change across restores.
	MaxParallelism int
	// BatchSize is the number of records per batch between subtasks (1024).
	BatchSize int
	// ChannelCapacity is the number of batches buffered per input (8).
	ChannelCapacity int
	// WatermarkInterval is how often a source subtask asks its source for
	// its watermark (200ms, like Flink's auto-watermark interval); between
	// two asks no watermark is emitted, which keeps batches full.
	WatermarkInterval time.Duration
	Checkpoint        CheckpointOptions
	Restart           RestartOptions
	// Restore says where a run starts from (RestoreLatest by default).
	Restore RestorePoint
	// StateBackend keeps keyed state (in memory by default; the pebble one is
	// in state/pebblestate).
	StateBackend state.BackendFactory
	Logger       *slog.Logger
	// Registerer receives the job's metrics (none registered if nil).
	Registerer prometheus.Registerer
	// Listener, if set, receives the job's state changes and checkpoint
	// events; it must return quickly (see Listener).
	Listener Listener
}

// CheckpointOptions configures the checkpoint coordinator.
type CheckpointOptions struct {
	// Interval between periodic checkpoints; 0 disables them (the initial
	// checkpoint and the final one of a stop or a bounded job are still taken).
	Interval time.Duration
	// MinPause is the least time between the end of one checkpoint and the
	// start of the next.
	MinPause time.Duration
	// Timeout aborts a checkpoint that has not completed (10 minutes).
	Timeout time.Duration
	// Retain is the number of completed checkpoints kept (3).
	Retain int
	// Mode is barrier.ExactlyOnce (aligned, default) or barrier.AtLeastOnce.
	Mode barrier.Mode
	// AlignmentTimeout, if positive, aborts a checkpoint when a subtask has
	// waited longer than this, since the checkpoint's first barrier reached
	// it, for the barriers of its other inputs: its blocked inputs are read
	// again, the abort's error (an *AlignmentTimeoutError) names the slow
	// upstream subtasks, and the next checkpoint is tried as usual. 0 (the
	// default) waits up to Timeout. It needs ExactlyOnce mode and must be
	// shorter than Timeout.
	AlignmentTimeout time.Duration
}

// RestartOptions configures in-process restarts after a failure: each
// restart restores the latest completed checkpoint.
type RestartOptions struct {
	// MaxAttempts is the number of restarts allowed in a row (10); a
	// completed checkpoint resets the count. Negative: never restart.
	MaxAttempts int
	// InitialBackoff (100ms) doubles up to MaxBackoff (30s).
	InitialBackoff, MaxBackoff time.Duration
}

// RestorePoint selects the checkpoint a run starts from.
type RestorePoint struct {
	kind uint8
	id   barrier.CheckpointID
}

var (
	// RestoreLatest restores the newest valid checkpoint, if any.
	RestoreLatest = RestorePoint{}
	// RestoreNone starts fresh, ignoring existing checkpoints (which are
	// then superseded by the new run's).
	RestoreNone = RestorePoint{kind: 1}
)

// RestoreCheckpoint restores checkpoint id, failing if it is not valid.
func RestoreCheckpoint(id barrier.CheckpointID) RestorePoint { return RestorePoint{kind: 2, id: id} }

func (o *Options) setDefaults() {
	if o.Parallelism == 0 {
		o.Parallelism = 1
	}
	if o.MaxParallelism == 0 {
		o.MaxParallelism = state.DefaultMaxParallelism
	}
	if o.BatchSize == 0 {
		o.BatchSize = 1024
	}
	if o.ChannelCapacity == 0 {
		o.ChannelCapacity = 8
	}
	if o.WatermarkInterval == 0 {
		o.WatermarkInterval = 200 * time.Millisecond
	}
	if o.Checkpoint.Timeout == 0 {
		o.Checkpoint.Timeout = 10 * time.Minute
	}
	if o.Checkpoint.Retain == 0 {
		o.Checkpoint.Retain = 3
	}
	if o.Restart.MaxAttempts == 0 {
		o.Restart.MaxAttempts = 10
	}
	if o.Restart.InitialBackoff == 0 {
		o.Restart.InitialBackoff = 100 * time.Millisecond
	}
	if o.Restart.MaxBackoff == 0 {
		o.Restart.MaxBackoff = 30 * time.Second
	}
	if o.StateBackend == nil {
		o.StateBackend = state.NewMemoryFactory()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Name == "" {
		errs = append(errs, errors.New("job name is empty"))
	}
	if o.MaxParallelism < 1 || o.MaxParallelism > 1<<15 {
		errs = append(errs, fmt.Errorf("max parallelism %d out of [1, 32768]", o.MaxParallelism))
	}
	if o.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size %d < 1", o.BatchSize))
	}
	if o.ChannelCapacity < 1 {
		errs = append(errs, fmt.Errorf("channel capacity %d < 1", o.ChannelCapacity))
	}
	if o.WatermarkInterval < 0 {
		errs = append(errs, fmt.Errorf("watermark interval %s < 0", o.WatermarkInterval))
	}
	if o.Checkpoint.Interval < 0 || o.Checkpoint.MinPause < 0 || o.Checkpoint.Timeout < 0 || o.Checkpoint.AlignmentTimeout < 0 {
		errs = append(errs, errors.New("checkpoint durations must not be negative"))
	}
	if at := o.Checkpoint.AlignmentTimeout; at > 0 {
		if o.Checkpoint.Mode != barrier.ExactlyOnce {
			errs = append(errs, fmt.Errorf("checkpoint alignment timeout %s needs mode %s (mode %s does not align)", at, barrier.ExactlyOnce, o.Checkpoint.Mode))
		}
		if at >= o.Checkpoint.Timeout {
			errs = append(errs, fmt.Errorf("checkpoint alignment timeout %s must be shorter than the checkpoint timeout %s", at, o.Checkpoint.Timeout))
		}
	}
	if o.Checkpoint.Retain < 1 {
		errs = append(errs, fmt.Errorf("checkpoint retain %d < 1", o.Checkpoint.Retain))
	}
	return errors.Join(errs...)
}

// Job is a dataflow graph under construction, then running. Build it with
// the generic functions of this package (FromSource, Map, KeyBy, ...), then
// call Run once.
type Job struct {
	opts  Options
	nodes []*node
	uids  map[string]struct{}
	errs  []error
	built bool

	metrics *metrics
	board   *statusBoard
	stopReq chan struct{}
}

// NewJob starts building a job.
func NewJob(opts Options) *Job {
	opts.setDefaults()
	return &Job{opts: opts, uids: map[string]struct{}{}, board: newStatusBoard(opts.Name, opts.Listener),
		stopReq: make(chan struct{}, 1)}
}

// Options returns the job's options with defaults applied.
func (j *Job) Options() Options { return j.opts }

// Stop asks a running job to stop with a final checkpoint: sources stop
// reading, the final checkpoint completes (sinks commit), and Run returns
// nil. A failure on the way restarts the job like any failure (within the
// restart options), and the restored job stops again with a final
// checkpoint. Cancelling Run's context instead stops at once, leaving the
// state at the last completed checkpoint.
func (j *Job) Stop() { signal(j.stopReq) }
