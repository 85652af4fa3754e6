package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// topics finds the partitions a subtask reads: those of the configured
// topics (or of the topics matching the pattern), among Config.Partitions
// when it is set, that SubtaskFor gives it.
type topics struct {
	names      []string
	pattern    *regexp.Regexp
	partitions []int32 // nil: all
	subtask    int
	par        int
	log        *slog.Logger
}

// reads reports whether the subtask reads partition tp.
func (t *topics) reads(tp topicPartition) bool {
	return t.matches(tp.topic) && (t.partitions == nil || slices.Contains(t.partitions, tp.partition)) &&
		SubtaskFor(tp.topic, tp.partition, t.par) == t.subtask
}

func (t *topics) matches(topic string) bool {
	if t.pattern != nil {
		return t.pattern.MatchString(topic)
	}
	return slices.Contains(t.names, topic)
}

// owned lists the partitions, existing now, that the subtask reads. A named
// topic that does not exist yet has none; missing reports whether there is
// one.
func (t *topics) owned(ctx context.Context, adm *kadm.Client) (found map[topicPartition]struct{}, missing bool, err error) {
	details, err := adm.ListTopics(ctx, t.names...) // no names: every topic but internal ones
	if err != nil {
		return nil, false, fmt.Errorf("list topics: %w", err)
	}
	found = make(map[topicPartition]struct{})
	for _, d := range details {
		if !t.matches(d.Topic) {
			continue
		}
		if d.Err != nil {
			if errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				t.log.Debug("kafka source: topic does not exist (yet)", "topic", d.Topic)
				missing = true
				continue
			}
			return nil, false, fmt.Errorf("describe topic %q: %w", d.Topic, d.Err)
		}
		for p := range d.Partitions {
			if tp := (topicPartition{d.Topic, p}); t.reads(tp) {
				found[tp] = struct{}{}
			}
		}
	}
	return found, missing, nil
}

// resolveStart returns the exact start offset of every partition in tps for
// start position s (atEarliest for the earliest offset), so that the first
// checkpoint records where reading began.
func resolveStart(ctx context.Context, adm *kadm.Client, s StartPosition, group string, readCommitted bool,
	tps map[topicPartition]struct{}) (map[topicPartition]int64, error) {
	out := make(map[topicPartition]int64, len(tps))
	var names []string
	for tp := range tps {
		out[tp] = atEarliest
		if !slices.Contains(names, tp.topic) {
			names = append(names, tp.topic)
		}
	}
	if len(tps) == 0 {
		return out, nil
	}
	fromListed := func(listed kadm.ListedOffsets, err error, only func(topicPartition) bool) error {
		if err != nil {
			return err
		}
		for tp := range tps {
			if only != nil && !only(tp) {
				continue
			}
			o, ok := listed.Lookup(tp.topic, tp.partition)
			if !ok {
				return fmt.Errorf("no offset listed for %s", tp)
			}
			if o.Err != nil {
				return fmt.Errorf("list offset of %s: %w", tp, o.Err)
			}
			out[tp] = o.Offset
		}
		return nil
	}
	end := func(only func(topicPartition) bool) error {
		if readCommitted {
			l, err := adm.ListCommittedOffsets(ctx, names...)
			return fromListed(l, err, only)
		}
		l, err := adm.ListEndOffsets(ctx, names...)
		return fromListed(l, err, only)
	}
	switch s.kind {
	case startEarliest:
	case startLogStart:
		l, err := adm.ListStartOffsets(ctx, names...)
		return out, fromListed(l, err, nil)
	case startLatest:
		return out, end(nil)
	case startTimestamp:
		l, err := adm.ListOffsetsAfterMilli(ctx, s.at.UnixMilli(), names...)
		return out, fromListed(l, err, nil)
	case startOffsets:
		for tp := range tps {
			if o, ok := s.offsets[tp.topic][tp.partition]; ok {
				out[tp] = o
			}
		}
	case startCommitted:
		committed, err := adm.FetchOffsetsForTopics(ctx, group, names...)
		if err == nil {
			err = committed.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("fetch offsets of group %q: %w", group, err)
		}
		missing := map[topicPartition]bool{}
		for tp := range tps {
			if o, ok := committed.Lookup(tp.topic, tp.partition); ok && o.At >= 0 {
				out[tp] = o.At
			} else {
				missing[tp] = true
			}
		}
		if len(missing) > 0 && s.fallback == startLatest {
			return out, end(func(tp topicPartition) bool { return missing[tp] })
		}
	}
	return out, nil
}

// resolveStops returns the stop offset of every partition in start for a
// bounded source: its end offset now (the last stable offset under
// read_committed). It replaces atEarliest in start by the earliest offset,
// so that a partition with nothing to read is done at once.
func resolveStops(ctx context.Context, adm *kadm.Client, readCommitted bool, start map[topicPartition]int64) (map[topicPartition]int64, error) {
	all := make(map[topicPartition]struct{}, len(start))
	early := make(map[topicPartition]struct{})
	for tp, off := range start {
		all[tp] = struct{}{}
		if off == atEarliest {
			early[tp] = struct{}{}
		}
	}
	stops, err := resolveStart(ctx, adm, StartLatest(), "", readCommitted, all)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	first, err := resolveStart(ctx, adm, StartPosition{kind: startLogStart}, "", readCommitted, early)
	if err != nil {
		return nil, fmt.Errorf("earliest offsets: %w", err)
	}
	maps.Copy(start, first)
	return stops, nil
}

// discoverer looks for new partitions on its own goroutine, so that Read
// never waits on metadata: once at the start (a restored subtask opens
// from its checkpoint alone), then every interval unless that is negative.
// While a named topic does not exist it looks sooner, from
// missingTopicRetry doubling up to the interval: a job started before the
// job that creates its topic (an upstream's changelog) reads it soon after
// it exists. It keeps only the latest set found.
type discoverer struct {
	topics *topics
	adm    *kadm.Client
	every  time.Duration
	log    *limitedLog
	fresh  atomic.Bool
	mu     struct {
		sync.Mutex
		found map[topicPartition]struct{}
	}
}

func (d *discoverer) run(ctx context.Context) {
	missing := d.discover(ctx)
	if d.every <= 0 {
		return
	}
	retry := missingTopicRetry
	for {
		wait := d.every
		if missing {
			wait, retry = min(retry, d.every), retry*2
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			missing = d.discover(ctx)
		}
	}
}

// missingTopicRetry is the first wait before a missing named topic is
// looked for again.
const missingTopicRetry = 100 * time.Millisecond

// discover lists the partitions once; it reports whether a named topic is
// missing.
func (d *discoverer) discover(ctx context.Context) (missing bool) {
	rctx, cancel := context.WithTimeout(ctx, max(d.every, defaultDiscoveryInterval))
	found, missing, err := d.topics.owned(rctx, d.adm)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.log.warn("kafka source: partition discovery failed; retrying at the next interval", "error", err)
		}
		return false
	}
	d.mu.Lock()
	d.mu.found = found
	d.mu.Unlock()
	d.fresh.Store(true)
	return missing
}

// take returns the partitions found since the last take, if any.
func (d *discoverer) take() (map[topicPartition]struct{}, bool) {
	if !d.fresh.Swap(false) {
		return nil, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.found, true
}
