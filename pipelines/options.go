package pipelines

import (
	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
)

// RuntimeOptions maps the job-wide settings of s to runtime options. The
// wiring adds what a file does not hold: state backend, logger, metrics
// registerer and restore point.
func (s *Spec) RuntimeOptions() runtime.Options {
	mode := barrier.ExactlyOnce
	if s.Checkpoint.Mode == "at_least_once" {
		mode = barrier.AtLeastOnce
	}
	attempts := s.Restart.MaxAttempts
	if attempts == 0 {
		attempts = -1 // the runtime reads 0 as its default; in a file 0 means none
	}
	return runtime.Options{
		Name:           s.Job.Name,
		DataDir:        s.DataDir,
		Parallelism:    s.Job.Parallelism,
		MaxParallelism: s.Job.MaxParallelism,
		Checkpoint: runtime.CheckpointOptions{
			Interval: s.Checkpoint.Interval.Std(),
			MinPause: s.Checkpoint.MinPause.Std(),
			Timeout:  s.Checkpoint.Timeout.Std(),
			Retain:   s.Checkpoint.Retain,
			Mode:     mode,
			// validated against mode and timeout by the loader
			AlignmentTimeout: s.Checkpoint.AlignmentTimeout.Std(),
		},
		Restart: runtime.RestartOptions{
			MaxAttempts:    attempts,
			InitialBackoff: s.Restart.InitialBackoff.Std(),
			MaxBackoff:     s.Restart.MaxBackoff.Std(),
		},
	}
}
