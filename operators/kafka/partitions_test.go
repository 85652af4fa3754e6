package kafka

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/state"
)

// TestSubtaskForSpreadsEvenly: the partitions of one topic go round-robin
// from a start that depends on the topic, so each subtask gets ⌊n/p⌋ or
// ⌈n/p⌉ of them, and the answer depends on nothing but the arguments.
func TestSubtaskForSpreadsEvenly(t *testing.T) {
	for _, topic := range []string{"orders", "a", "changelog-7", ""} {
		for p := 1; p <= 7; p++ {
			for n := 1; n <= 20; n++ {
				count := make([]int, p)
				for part := range int32(n) {
					s := SubtaskFor(topic, part, p)
					if s != SubtaskFor(topic, part, p) || s < 0 || s >= p {
						t.Fatalf("SubtaskFor(%q, %d, %d) = %d", topic, part, p, s)
					}
					count[s]++
				}
				for s, c := range count {
					if c < n/p || c > (n+p-1)/p {
						t.Fatalf("topic %q, %d partitions over %d subtasks: subtask %d gets %d", topic, n, p, s, c)
					}
				}
			}
		}
	}
}

func TestOffsetsRoundTrip(t *testing.T) {
	parts := map[topicPartition]*partState{
		{"a", 0}:         {tp: topicPartition{"a", 0}, next: 17},
		{"a", 3}:         {tp: topicPartition{"a", 3}, next: atEarliest},
		{"b-ü", 1 << 20}: {tp: topicPartition{"b-ü", 1 << 20}, next: 1 << 40},
	}
	for _, bounded := range []bool{false, true} {
		for tp, ps := range parts {
			ps.stop = int64(len(tp.topic)) + 1<<41
		}
		items := encodeOffsets(parts, bounded, false, nil)
		// A union list concatenates every subtask's items, markers included.
		items = append(items, encodeOffsets(map[topicPartition]*partState{}, bounded, false, nil)...)
		got, err := decodeOffsets(items)
		if err != nil || !got.ok || got.bounded != bounded {
			t.Fatalf("bounded %v: decode: %+v %v", bounded, got, err)
		}
		if len(got.next) != len(parts) {
			t.Fatalf("decoded %v", got.next)
		}
		wantStops := 0
		if bounded {
			wantStops = len(parts)
		}
		if len(got.stops) != wantStops {
			t.Fatalf("bounded %v: decoded stops %v", bounded, got.stops)
		}
		for tp, ps := range parts {
			if got.next[tp] != ps.next {
				t.Errorf("%s: %d, want %d", tp, got.next[tp], ps.next)
			}
			if s, ok := got.stops[tp]; bounded && (!ok || s != ps.stop) {
				t.Errorf("%s: stop %d, want %d", tp, s, ps.stop)
			}
		}
	}
	if got, err := decodeOffsets(nil); got.ok || err != nil {
		t.Errorf("no items: ok %v err %v, want a fresh start", got.ok, err)
	}
}

func TestOffsetsCorrupt(t *testing.T) {
	good := encodeOffsets(map[topicPartition]*partState{{"a", 1}: {tp: topicPartition{"a", 1}, next: 5, stop: 7}}, true, false, nil)
	other := encodeOffsets(map[topicPartition]*partState{{"a", 1}: {tp: topicPartition{"a", 1}, next: 6, stop: 8}}, true, false, nil)
	for name, items := range map[string][][]byte{
		"unknown kind":   {{9, 1, 2}},
		"empty item":     {{}},
		"short":          {good[2][:len(good[2])-1]},
		"long":           {append(append([]byte(nil), good[2]...), 0)},
		"two offsets":    {good[0], good[2], other[2]},
		"two stops":      {good[0], good[1], good[3], other[3]},
		"bad name width": {{itemOffset, 200}},
	} {
		if _, err := decodeOffsets(items); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func TestConfigErrorsAllAtOnce(t *testing.T) {
	_, err := NewSource(Config{TopicPattern: "(", Topics: []string{""}, Start: StartCommitted(StartEarliest()),
		OnDecodeError: DeadLetter, Connection: Connection{SASL: &SASL{Mechanism: "GSSAPI"}}}, Raw())
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"no brokers", "both Topics and TopicPattern", "empty topic name",
		"committed needs a Group", "dead_letter needs a DeadLetterTopic", `unknown sasl mechanism "GSSAPI"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q missing from %v", want, err)
		}
	}
	if _, err := NewSource(Config{Connection: Connection{Brokers: []string{"x"}}, TopicPattern: "("}, Raw()); err == nil || !strings.Contains(err.Error(), "topic pattern") {
		t.Errorf("bad pattern: %v", err)
	}
	if _, err := NewSource(Config{Connection: Connection{Brokers: []string{"x"}, TLS: &TLS{CertFile: "c"}}, Topics: []string{"t"}}, Raw()); err == nil {
		t.Error("a cert without a key accepted")
	}
	if _, err := NewSource(Config{Connection: Connection{Brokers: []string{"x"}}, Topics: []string{"t"}}, Raw()); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

func TestParse(t *testing.T) {
	ms := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]string{
		"earliest":                       "earliest",
		"latest":                         "latest",
		"committed":                      "committed (else earliest)",
		"committed-else-latest":          "committed (else latest)",
		"timestamp:2026-01-02T03:04:05Z": "timestamp 2026-01-02T03:04:05Z",
		fmt.Sprintf("timestamp:%d", ms.UnixMilli()): "timestamp 2026-01-02T03:04:05Z",
	} {
		got, err := ParseStartPosition(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseStartPosition(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "newest", "timestamp:", "timestamp:yesterday", "timestamp:12x"} {
		if _, err := ParseStartPosition(bad); err == nil {
			t.Errorf("ParseStartPosition(%q) accepted", bad)
		}
	}
	for _, p := range []ErrorPolicy{Fail, Skip, DeadLetter} {
		if got, err := ParseErrorPolicy(p.String()); got != p || err != nil {
			t.Errorf("ParseErrorPolicy(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := ParseErrorPolicy("ignore"); err == nil {
		t.Error("ParseErrorPolicy(ignore) accepted")
	}
}

// TestCutsRoundTrip: with Cuts a checkpoint holds each subtask's round and
// the stretches a partition handed out; it is a cut only if every subtask
// was at it (a stop may find one there and the other not), and a subtask
// that read nothing (no boundary yet) does not disagree.
func TestCutsRoundTrip(t *testing.T) {
	const b = int64(7 * time.Second)
	a0 := &partState{tp: topicPartition{"a", 0}, next: 10, read: 25, skips: []cutSkip{{below: 40, boundary: b - int64(time.Second)}}}
	a1 := &partState{tp: topicPartition{"a", 1}, next: 3, read: 3}
	at := encodeOffsets(map[topicPartition]*partState{a0.tp: a0}, false, true, &cutRound{boundary: b, atCut: true})
	for name, c := range map[string]struct {
		other *cutRound
		want  cutRound
	}{
		"both at the cut": {&cutRound{boundary: b, atCut: true}, cutRound{boundary: b, atCut: true}},
		"one at the cut":  {&cutRound{boundary: b}, cutRound{boundary: b}},
		"one read none":   {&cutRound{}, cutRound{boundary: b}},
	} {
		items := append(slices.Clone(at), encodeOffsets(map[topicPartition]*partState{a1.tp: a1}, false, true, c.other)...)
		got, err := decodeOffsets(items)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.round != c.want {
			t.Errorf("%s: round %+v, want %+v", name, got.round, c.want)
		}
		want := []cutSkip{{below: 40, boundary: b - int64(time.Second)}, {below: 25, boundary: b}}
		if !slices.Equal(got.skips[a0.tp], want) || len(got.skips[a1.tp]) != 0 || got.next[a0.tp] != 10 {
			t.Errorf("%s: skips %+v, next %v; want %+v for a/0 at 10, none for a/1", name, got.skips, got.next, want)
		}
	}
	other := encodeOffsets(nil, false, true, &cutRound{boundary: b + int64(time.Second)})
	if _, err := decodeOffsets(append(slices.Clone(at), other...)); !errors.Is(err, state.ErrCorrupt) {
		t.Errorf("subtasks at two boundaries: %v, want ErrCorrupt", err)
	}
}

// TestCutSkips: a record handed out before the restored checkpoint is one
// below a stretch and at or before its boundary; the stretches are
// forgotten once read past.
func TestCutSkips(t *testing.T) {
	ps := &partState{next: 10, read: 10, skips: []cutSkip{{below: 20, boundary: 100}, {below: 30, boundary: 50}}}
	for _, c := range []struct {
		off, ts int64
		want    bool
	}{{12, 100, true}, {12, 101, false}, {25, 50, true}, {25, 60, false}, {30, 1, false}} {
		if got := ps.skipped(c.off, c.ts); got != c.want {
			t.Errorf("skipped(%d, %d) = %v, want %v", c.off, c.ts, got, c.want)
		}
	}
	ps.took(22)
	if !ps.replaying() || len(ps.skips) != 1 || ps.next != 23 {
		t.Fatalf("after offset 22: skips %+v, next %d", ps.skips, ps.next)
	}
	ps.took(29)
	if ps.replaying() || len(ps.skips) != 0 {
		t.Fatalf("after offset 29: skips %+v", ps.skips)
	}
}
