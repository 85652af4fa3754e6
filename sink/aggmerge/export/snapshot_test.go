package export

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// TestReadSnapshotVersions writes two changelogs by hand, a (one
// partition) and b reading a, with versions: b's newest version read a's
// first version and part of its second (not exact). The consistent read
// takes b's first version and a's first, each table read up to its end
// offsets and not past them; with only b's unaligned version there is no
// consistent set, and the error says why; the weak read takes the newest
// of each and says it is not consistent.
func TestReadSnapshotVersions(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	a, b := kafkatest.NewTopic(t, brokers, 1), kafkatest.NewTopic(t, brokers, 1)
	rec := func(topic, key, value string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Key: []byte(key)}
		if value != "" {
			r.Value = []byte(value)
		}
		return r
	}
	// a: offsets 0, 1 (version 1 ends at 2), then 2 (version 2 ends at 3).
	kafkatest.Produce(t, brokers, rec(a, `{"k":"x"}`, `{"k":"x","n":1}`), rec(a, `{"k":"y"}`, `{"k":"y","n":5}`))
	kafkatest.Produce(t, brokers, rec(a, `{"k":"x"}`, `{"k":"x","n":2}`))
	// b: offset 0 (version 1, from a's 1 exactly), 1 (version 2, from a's
	// 1 and part of 2).
	kafkatest.Produce(t, brokers, rec(b, `{"all":1}`, `{"all":1,"n":6}`))
	kafkatest.Produce(t, brokers, rec(b, `{"all":1}`, `{"all":1,"n":7}`))
	created := map[string]bool{}
	versions := func(topic string, vs ...Version) {
		if !created[topic] {
			kafkatest.CreateTopic(t, brokers, changelogfmt.VersionsTopic(topic), 1)
			created[topic] = true
		}
		var recs []*kgo.Record
		for i := range vs {
			vs[i].Topic, vs[i].Table = topic, topic
			r, err := changelogfmt.VersionRecord(changelogfmt.VersionsTopic(topic), &vs[i], 1000)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		kafkatest.Produce(t, brokers, recs...)
	}
	versions(a, Version{Version: 1, EndOffsets: []int64{2}}, Version{Version: 2, EndOffsets: []int64{3}})
	versions(b, Version{Version: 1, EndOffsets: []int64{1}, Upstream: []changelogfmt.UpstreamVersion{up(a, 1, true)}},
		Version{Version: 2, EndOffsets: []int64{2}, Upstream: []changelogfmt.UpstreamVersion{up(a, 1, false)}})
	ctx := context.Background()
	conn := kafka.Connection{Brokers: brokers}

	rows := func(s *Snapshot) []string {
		var out []string
		for _, ts := range s.Tables {
			var rs []string
			if err := ts.Rows.Each(func(k string, r kafka.Row) error {
				rs = append(rs, k+"="+r.String())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(rs)
			out = append(out, strings.Join(rs, " "))
		}
		return out
	}
	s, err := ReadSnapshot(ctx, SnapshotConfig{Kafka: conn, Topics: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"k":"x"}={"k":"x","n":1} {"k":"y"}={"k":"y","n":5}`, `{"all":1}={"all":1,"n":6}`}
	if !s.Consistent || s.Tables[0].Version.Version != 1 || s.Tables[1].Version.Version != 1 || !slices.Equal(rows(s), want) {
		t.Fatalf("consistent snapshot: %+v, rows %q; want versions 1 and 1, rows %q", s, rows(s), want)
	}

	// c read a's 1 and part of its 2, and has no other version.
	c := kafkatest.NewTopic(t, brokers, 1)
	versions(c, Version{Version: 1, EndOffsets: []int64{0}, Upstream: []changelogfmt.UpstreamVersion{up(a, 1, false)}})
	_, err = ReadSnapshot(ctx, SnapshotConfig{Kafka: conn, Topics: []string{a, b, c}})
	var ie *InconsistentError
	if !errors.As(err, &ie) || !errors.Is(err, ErrInconsistent) || len(ie.Reasons) != 1 ||
		!strings.Contains(ie.Reasons[0], `version 1 of "`+c+`" holds all of version 1 of "`+a+`" and maybe part of the next`) {
		t.Fatalf("snapshot with c: %v; want ErrInconsistent saying c's only version is not aligned", err)
	}

	versions(b, Version{Version: 3, EndOffsets: []int64{2}, Upstream: []changelogfmt.UpstreamVersion{up(a, 2, false)}})
	s, err = ReadSnapshot(ctx, SnapshotConfig{Kafka: conn, Topics: []string{a, b}, Weak: true})
	want = []string{`{"k":"x"}={"k":"x","n":2} {"k":"y"}={"k":"y","n":5}`, `{"all":1}={"all":1,"n":7}`}
	if err != nil || s.Consistent || s.Tables[0].Version.Version != 2 || s.Tables[1].Version.Version != 3 || !slices.Equal(rows(s), want) {
		t.Fatalf("weak snapshot: %+v, %v, rows %q; want versions 2 and 3 not consistent, rows %q", s, err, rows(s), want)
	}

	// The versions a hosting runner keeps are chosen among when it has
	// them for every table (weak: the newest of those, not Kafka's); when
	// they hold no consistent set, or a table has none, Kafka's are.
	kafkaVersions := func(topic string) []Version {
		vs, err := ReadVersions(ctx, conn, changelogfmt.VersionsTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	va, vb := kafkaVersions(a), kafkaVersions(b)
	for _, tc := range []struct {
		name         string
		local        map[string][]Version
		weak         bool
		wantA, wantB uint64
	}{
		{"weak, hosted", map[string][]Version{a: va[:1], b: vb[:1]}, true, 1, 1},
		{"weak, b not hosted", map[string][]Version{a: va[:1]}, true, 2, 3},
		{"consistent, hosted", map[string][]Version{a: va, b: vb}, false, 1, 1},
		{"no consistent set among the hosted", map[string][]Version{a: va, b: vb[1:]}, false, 1, 1},
	} {
		s, err := ReadSnapshot(ctx, SnapshotConfig{Kafka: conn, Topics: []string{a, b}, Weak: tc.weak,
			LocalVersions: func(topic string) ([]Version, bool) {
				vs, ok := tc.local[topic]
				return vs, ok
			}})
		if err != nil || s.Tables[0].Version.Version != tc.wantA || s.Tables[1].Version.Version != tc.wantB {
			t.Fatalf("%s: %+v, %v; want versions %d and %d", tc.name, s, err, tc.wantA, tc.wantB)
		}
	}
}
