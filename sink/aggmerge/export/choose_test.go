package export

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// ver is a version of topic with end offsets ends, reading ups.
func ver(topic string, n uint64, ends []int64, ups ...changelogfmt.UpstreamVersion) Version {
	return Version{Table: topic, Topic: topic, Version: n, EndOffsets: ends, Upstream: ups}
}

// up names version n of topic, exactly or not.
func up(topic string, n uint64, exact bool) changelogfmt.UpstreamVersion {
	return changelogfmt.UpstreamVersion{Table: topic, Topic: topic, Version: n, Exact: exact}
}

func numbers(vs []Version) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = v.Version
	}
	return out
}

// TestChooseVersions: the newest consistent set, over chains, diamonds,
// unaligned versions, versions with the same rows and weak reads.
func TestChooseVersions(t *testing.T) {
	a := TableVersions{Topic: "a", Versions: []Version{
		ver("a", 1, []int64{1, 0}), ver("a", 2, []int64{3, 2}), ver("a", 3, []int64{3, 2}), ver("a", 4, []int64{5, 2})}}
	b := TableVersions{Topic: "b", Versions: []Version{
		ver("b", 1, []int64{1}, up("a", 1, true)),
		ver("b", 2, []int64{2}, up("a", 2, true)),
		ver("b", 3, []int64{4}, up("a", 3, false))}} // unaligned: a's 3 and part of 4
	c := TableVersions{Topic: "c", Versions: []Version{
		ver("c", 7, []int64{1}, up("b", 1, true)),
		ver("c", 8, []int64{2}, up("b", 2, true)),
		ver("c", 9, []int64{3}, up("b", 3, true))}}
	d := TableVersions{Topic: "d", Versions: []Version{ // reads a too: with b, a diamond
		ver("d", 1, []int64{1}, up("a", 1, true)),
		ver("d", 2, []int64{2}, up("a", 3, true)), // a's 3 has a's 2's rows
		ver("d", 3, []int64{3}, up("a", 4, true))}}
	for _, tc := range []struct {
		name   string
		tables []TableVersions
		weak   bool
		want   []uint64
		reason string // of ErrInconsistent, when want is nil
	}{
		// b's 2 reads a's 2; a's 3 holds the same.
		{name: "chain", tables: []TableVersions{a, b, c}, want: []uint64{3, 2, 8}},
		{name: "chain, downstream first", tables: []TableVersions{c, b, a}, want: []uint64{8, 2, 3}},
		{name: "one table", tables: []TableVersions{b}, want: []uint64{3}},
		{name: "unrelated tables", tables: []TableVersions{a, c}, want: []uint64{4, 9}},
		{name: "weak", tables: []TableVersions{a, b, c}, weak: true, want: []uint64{4, 3, 9}},
		// b's newest exact is 2 (a's 2); d's 2 names a's 3, which has
		// the same end offsets: the same rows of a.
		{name: "diamond", tables: []TableVersions{a, b, d}, want: []uint64{3, 2, 2}},
		{name: "unaligned only", tables: []TableVersions{a, {Topic: "b", Versions: b.Versions[2:]}},
			reason: `version 3 of "b" holds all of version 3 of "a" and maybe part of the next`},
		{name: "upstream version no longer read", tables: []TableVersions{{Topic: "a", Versions: a.Versions[3:]}, {Topic: "b", Versions: b.Versions[:2]}},
			reason: `version 2 of "b" is derived from version 2 of "a", which is not among the 1 versions read of it`},
		{name: "names no version", tables: []TableVersions{a, {Topic: "b", Versions: []Version{ver("b", 1, []int64{1}, up("a", 1, false)), ver("b", 2, []int64{2})}}},
			reason: `version 2 of "b" names no version of "a" it read`},
		{name: "two jobs disagree", tables: []TableVersions{a, {Topic: "b", Versions: []Version{ver("b", 1, []int64{1}, up("a", 1, true), up("a", 2, true))}}},
			reason: `is derived from versions 1 and 2 of "a" (two jobs write it)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseVersions(tc.tables, tc.weak)
			if tc.want == nil {
				var ie *InconsistentError
				if !errors.Is(err, ErrInconsistent) || !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("got %v, %v; want ErrInconsistent saying %q", numbers(got), err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := numbers(got); !equalUints(g, tc.want) {
				t.Fatalf("chose %v, want %v", g, tc.want)
			}
		})
	}
	if _, err := ChooseVersions([]TableVersions{a, {Topic: "e"}}, true); err == nil || !strings.Contains(err.Error(), `table "e" has no versions yet`) {
		t.Fatalf("a table without versions: %v", err)
	}
}

func equalUints(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestChooseVersionsNeverBack grows random histories of a → b → c (each
// downstream version reading an upstream version at or after the last
// one's, exactly or not) and chooses after every new version: the chosen
// numbers never go back, and every choice is consistent.
func TestChooseVersionsNeverBack(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	tables := []TableVersions{{Topic: "a"}, {Topic: "b"}, {Topic: "c"}}
	add := func(i int) {
		tv := &tables[i]
		n := uint64(len(tv.Versions) + 1)
		v := ver(tv.Topic, n, []int64{int64(n)})
		if i > 0 {
			ups := tables[i-1].Versions
			if len(ups) == 0 {
				return
			}
			at := uint64(1)
			if len(tv.Versions) > 0 {
				at = tv.Versions[len(tv.Versions)-1].Upstream[0].Version
			}
			at += uint64(r.IntN(int(uint64(len(ups))-at) + 1))
			v.Upstream = []changelogfmt.UpstreamVersion{up(tables[i-1].Topic, at, r.IntN(3) == 0)}
		}
		tv.Versions = append(tv.Versions, v)
	}
	var last []uint64
	found := 0
	for range 600 {
		add(r.IntN(3))
		got, err := ChooseVersions(tables, false)
		if errors.Is(err, ErrInconsistent) || (err != nil && strings.Contains(err.Error(), "no versions yet")) {
			if last != nil {
				t.Fatalf("no consistent set after one was found (%v): %v", last, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		found++
		for i := 1; i < 3; i++ {
			if u := got[i].Upstream[0]; !u.Exact || u.Version != got[i-1].Version {
				t.Fatalf("chose %v: %s's version %d reads %+v", numbers(got), tables[i].Topic, got[i].Version, u)
			}
		}
		g := numbers(got)
		for i := range g {
			if last != nil && g[i] < last[i] {
				t.Fatalf("chose %v after %v: back", g, last)
			}
		}
		last = g
	}
	if found < 100 {
		t.Fatalf("only %d of 600 choices found a consistent set", found)
	}
}

// timed is v with event time ms.
func timed(v Version, ms int64) Version {
	v.EventTimeMs = ms
	return v
}

// TestChooseConsistent: the tables split into the parts of the topology,
// each at its newest consistent version, whose event time is the least of
// the versions chosen, not of the newest ones; a part without a
// consistent set does not hold the others back.
func TestChooseConsistent(t *testing.T) {
	a := TableVersions{Topic: "a", Versions: []Version{
		timed(ver("a", 1, []int64{1}), 1000), timed(ver("a", 2, []int64{2}), 2000), timed(ver("a", 3, []int64{3}), 3000)}}
	b := TableVersions{Topic: "b", Versions: []Version{
		timed(ver("b", 1, []int64{1}, up("a", 1, true)), 1000),
		timed(ver("b", 2, []int64{2}, up("a", 2, true)), 2000),
		timed(ver("b", 3, []int64{4}, up("a", 3, false)), 3000)}} // unaligned: its event time is a's 3's
	x := TableVersions{Topic: "x", Versions: []Version{timed(ver("x", 5, []int64{9}), 500)}}
	y := TableVersions{Topic: "y"}                                                                 // no versions yet
	z := TableVersions{Topic: "z", Versions: []Version{ver("z", 1, []int64{1}, up("x", 5, true))}} // no event time
	got := ChooseConsistent([]TableVersions{b, x, y, a, z})
	type part struct {
		topics   string
		versions []uint64
		eventMs  int64
		err      string
	}
	want := []part{
		{topics: "b,a", versions: []uint64{2, 2}, eventMs: 2000},
		{topics: "x,z", versions: []uint64{5, 1}, eventMs: 0},
		{topics: "y", err: "no versions yet"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d parts: %+v; want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if strings.Join(g.Topics, ",") != w.topics || !slices.Equal(numbers(g.Versions), w.versions) || g.EventTimeMs != w.eventMs ||
			(w.err == "") != (g.Err == nil) || (g.Err != nil && !strings.Contains(g.Err.Error(), w.err)) {
			t.Errorf("part %d: topics %v, versions %v, event time %d, err %v; want %+v", i, g.Topics, numbers(g.Versions), g.EventTimeMs, g.Err, w)
		}
	}
	now := time.UnixMilli(5000)
	if d, ok := got[0].Freshness(now); !ok || d != 3*time.Second {
		t.Errorf("freshness of a and b: %v, %v; want 3s (of the consistent set, not of b's newest)", d, ok)
	}
	if _, ok := got[1].Freshness(now); ok {
		t.Error("freshness of x and z known; z covers no event time")
	}
}
