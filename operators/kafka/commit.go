package kafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

const commitTimeout = 10 * time.Second

// committer commits the offsets of completed checkpoints to the consumer
// group on its own goroutine, for lag monitoring only: the task never waits
// on it, and only the latest offsets wait to be committed.
type committer struct {
	adm   *kadm.Client
	group string
	log   *limitedLog
	wake  chan struct{}
	mu    struct {
		sync.Mutex
		next kadm.Offsets
	}
}

func newCommitter(adm *kadm.Client, group string, log *limitedLog) *committer {
	return &committer{adm: adm, group: group, log: log, wake: make(chan struct{}, 1)}
}

func (c *committer) submit(o kadm.Offsets) {
	c.mu.Lock()
	c.mu.next = o
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *committer) take() kadm.Offsets {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.mu.next
	c.mu.next = nil
	return o
}

// run commits until ctx ends, then commits what is still pending once more
// (the offsets of a stop's final checkpoint).
func (c *committer) run(ctx context.Context) {
	for {
		select {
		case <-c.wake:
			c.commit(ctx)
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			c.commit(final)
			cancel()
			return
		}
	}
}

func (c *committer) commit(ctx context.Context) {
	o := c.take()
	if len(o) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	resp, err := c.adm.CommitOffsets(ctx, c.group, o)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The job is stopping: the final commit in run takes these offsets.
		c.putBack(o)
		return
	}
	if err != nil {
		c.log.warn("kafka source: commit offsets for monitoring failed", "group", c.group, "error", err)
	}
}

// putBack returns offsets whose commit was cut short, unless newer ones
// are pending.
func (c *committer) putBack(o kadm.Offsets) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.next == nil {
		c.mu.next = o
	}
}

// groupOffsets converts a checkpoint's offsets for committing; partitions
// that have handed out nothing are left out.
func groupOffsets(parts map[topicPartition]*partState) kadm.Offsets {
	o := make(kadm.Offsets)
	for tp, ps := range parts {
		if ps.next >= 0 {
			o.Add(kadm.Offset{Topic: tp.topic, Partition: tp.partition, At: ps.next, LeaderEpoch: -1})
		}
	}
	return o
}
