package kafka

import (
	"errors"
	"fmt"
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
		items := encodeOffsets(parts, bounded, false)
		// A union list concatenates every subtask's items, markers included.
		items = append(items, encodeOffsets(map[topicPartition]*partState{}, bounded, false)...)
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
	good := encodeOffsets(map[topicPartition]*partState{{"a", 1}: {tp: topicPartition{"a", 1}, next: 5, stop: 7}}, true, false)
	other := encodeOffsets(map[topicPartition]*partState{{"a", 1}: {tp: topicPartition{"a", 1}, next: 6, stop: 8}}, true, false)
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
