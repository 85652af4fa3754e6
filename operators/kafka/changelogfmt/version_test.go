package changelogfmt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func goldenVersion() *Version {
	return &Version{Table: "region_totals", TableID: "00000000-0000-0000-0000-000000000001", Topic: "region_totals-changelog",
		Version: 1042, EndOffsets: []int64{17, 0, 9, 4},
		Writers:    []WriterCheckpoint{{Writer: "regions/region_totals", Job: "regions", Checkpoint: 31}},
		Upstream:   []UpstreamVersion{{Table: "user_totals", TableID: "00000000-0000-0000-0000-000000000002", Topic: "user_totals-changelog", Version: 77}},
		CommitTime: time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC)}
}

// TestVersionRecordGolden: the version record (key, value, headers) is
// exactly testdata/version.golden, and decodes back to what was written.
func TestVersionRecordGolden(t *testing.T) {
	v := goldenVersion()
	r, err := VersionRecord("region_totals-changelog.versions", v, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "topic %s partition %d\nkey   %s\nvalue %s\n", r.Topic, r.Partition, r.Key, r.Value)
	for _, h := range r.Headers {
		fmt.Fprintf(&out, "  %s: %s\n", h.Key, h.Value)
	}
	path := filepath.Join("testdata", "version.golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("%s differs (rerun with -update and review the diff):\n%s", path, out.Bytes())
	}
	got, err := DecodeVersion(r)
	if err != nil {
		t.Fatal(err)
	}
	v.Format, v.CommitTime = VersionFormat, v.CommitTime.Truncate(time.Microsecond)
	if !got.SameContent(v) || got.Version != v.Version || !got.CommitTime.Equal(v.CommitTime) || got.Table != v.Table || got.Format != 1 {
		t.Fatalf("decoded %+v, want %+v", got, v)
	}
}

// TestDecodeVersionRefuses: a record that is not a version, of a newer
// format, or whose headers disagree with its value is ErrVersion.
func TestDecodeVersionRefuses(t *testing.T) {
	good, err := VersionRecord("t.versions", goldenVersion(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if string(good.Key) != "2" { // 1042 mod 10
		t.Fatalf("key %s, want 2", good.Key)
	}
	with := func(name, value string) *kgo.Record {
		r := *good
		r.Headers = nil
		for _, h := range good.Headers {
			if h.Key == name {
				h.Value = []byte(value)
			}
			r.Headers = append(r.Headers, h)
		}
		return &r
	}
	for name, r := range map[string]*kgo.Record{
		"changelog record": {Key: []byte(`{"k":1}`), Value: []byte(`{"k":1}`)},
		"newer format":     with(HeaderVersionFormat, "2"),
		"other number":     with(HeaderVersion, "1043"),
		"bad value":        func() *kgo.Record { r := *good; r.Value = []byte("{"); return &r }(),
	} {
		if _, err := DecodeVersion(r); !errors.Is(err, ErrVersion) {
			t.Errorf("%s: %v, want ErrVersion", name, err)
		}
	}
	if _, err := VersionRecord("t.versions", goldenVersion(), 0); err == nil {
		t.Error("history 0 accepted")
	}
}

// TestVersionCovers: a position covers a version when it is at or past
// every partition's end offset; a partition with end 0 is always covered.
func TestVersionCovers(t *testing.T) {
	v := Version{EndOffsets: []int64{3, 0, 5}}
	pos := map[int32]int64{0: 3, 2: 5}
	if !v.Covers(func(p int32) int64 { return pos[p] }) {
		t.Fatal("positions at the ends not covering")
	}
	pos[2] = 4
	if v.Covers(func(p int32) int64 { return pos[p] }) {
		t.Fatal("position before an end covering")
	}
}

// TestExactlyAt: positions at a version's end offsets, or just past the
// commit marker there, are exact; one record further (or a record of an
// empty partition) is not.
func TestExactlyAt(t *testing.T) {
	v := &Version{EndOffsets: []int64{5, 0, 9}}
	for _, tc := range []struct {
		pos   []int64
		exact bool
	}{
		{[]int64{5, 0, 9}, true},
		{[]int64{6, 0, 10}, true}, // past the markers
		{[]int64{7, 0, 9}, false}, // a record after the marker
		{[]int64{5, 1, 9}, false}, // the first record of an empty partition
		{[]int64{4, 0, 9}, false}, // not covered
	} {
		at := func(p int32) int64 { return tc.pos[p] }
		if got := v.ExactlyAt(at); got != tc.exact {
			t.Errorf("ExactlyAt(%v) = %v, want %v", tc.pos, got, tc.exact)
		}
	}
}
