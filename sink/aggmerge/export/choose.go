package export

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// ErrInconsistent marks a consistent read for which the versions read hold
// no mutually consistent set (InconsistentError says why).
var ErrInconsistent = errors.New("export: no consistent set of versions")

// TableVersions are the versions of one table, oldest first (as
// ReadVersions returns them).
type TableVersions struct {
	Topic    string // the changelog topic
	Versions []Version
}

// InconsistentError says why no consistent set exists: per table whose
// version determines the others (a table no other named table reads), why
// its newest version does not fit, and how many were tried.
type InconsistentError struct {
	Reasons []string
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("%v: %s", ErrInconsistent, strings.Join(e.Reasons, "; "))
}

func (e *InconsistentError) Unwrap() error { return ErrInconsistent }

// chooseBudget bounds the versions a search for a consistent set tries.
const chooseBudget = 1 << 20

// ChooseVersions picks one version per table (in the order given).
//
// Consistent (weak false): the newest set of versions in which each
// version of a table that another named table's versions name as upstream
// is derived from exactly the version chosen for that upstream table: its
// upstream entry for the table is Exact (its checkpoint read all of the
// upstream version and nothing after, see changelogfmt.Version.ExactlyAt)
// and names the chosen version, or one with the same end offsets (the same
// rows). A table that names another as upstream in none of its versions is
// not constrained by it; one that does in some versions must in the one
// chosen. Only the named tables are related: a table between two named
// ones (B in A → B → C, when reading A and C) must be named too.
//
// The versions of the tables nothing named reads (the "last" tables of the
// named topology) determine the others, which follow from their upstream
// entries. Newest means: the last table's newest version that has a
// consistent set, then for the next last table, and so on; so repeated
// choices over versions that only grow never go back while the jobs only
// move forward (a restore of an older checkpoint is a new version of older
// content, and its upstream versions are older ones).
//
// Of versions that hold the same (the same end offsets, so the same rows,
// and the same upstream versions: a job that checkpointed while its input
// was idle), the newest is returned.
//
// Weak: the newest version of each table, unchecked.
func ChooseVersions(tables []TableVersions, weak bool) ([]Version, error) {
	index := map[string]int{}
	for i, t := range tables {
		if _, dup := index[t.Topic]; dup {
			return nil, fmt.Errorf("choose versions: table %q named twice", t.Topic)
		}
		index[t.Topic] = i
		if len(t.Versions) == 0 {
			return nil, fmt.Errorf("choose versions: table %q has no versions yet (in %s)", t.Topic, changelogfmt.VersionsTopic(t.Topic))
		}
	}
	if weak {
		out := make([]Version, len(tables))
		for i, t := range tables {
			out[i] = t.Versions[len(t.Versions)-1]
		}
		return out, nil
	}
	c := chooser{tables: tables, deps: make([][]int, len(tables)), read: make([]bool, len(tables))}
	for i, t := range tables {
		for _, v := range t.Versions {
			for _, u := range v.Upstream {
				if j, ok := index[u.Topic]; ok && j != i && !slices.Contains(c.deps[i], j) {
					c.deps[i] = append(c.deps[i], j)
					c.read[j] = true
				}
			}
		}
		slices.Sort(c.deps[i])
	}
	for i := range tables {
		if !c.read[i] {
			c.lasts = append(c.lasts, i)
		}
	}
	if len(c.lasts) == 0 {
		return nil, errors.New("choose versions: the named tables read each other in a cycle")
	}
	c.reasons, c.fit = make([]string, len(c.lasts)), make([]bool, len(c.lasts))
	chosen := make([]*Version, len(tables))
	if !c.search(0, chosen) {
		// The tables none of whose versions fits say why; else all do.
		var e InconsistentError
		for k, r := range c.reasons {
			if r != "" && !c.fit[k] {
				e.Reasons = append(e.Reasons, r)
			}
		}
		if len(e.Reasons) == 0 {
			for _, r := range c.reasons {
				if r != "" {
					e.Reasons = append(e.Reasons, r)
				}
			}
		}
		if c.tried >= chooseBudget {
			e.Reasons = append(e.Reasons, fmt.Sprintf("gave up after %d tries", c.tried))
		}
		if len(e.Reasons) == 0 {
			e.Reasons = append(e.Reasons, "the newest versions of the tables read by several others name different upstream versions")
		}
		return nil, &e
	}
	out := make([]Version, len(tables))
	for i, v := range chosen {
		if v == nil {
			panic(fmt.Sprintf("export: table %q left without a version", tables[i].Topic))
		}
		out[i] = *c.newestSame(i, v)
	}
	return out, nil
}

// newestSame returns the newest version of table i after v that holds
// what v holds: the same end offsets (the same rows) and the same upstream
// versions (so the set stays consistent). A job checkpointing while its
// input is idle publishes such versions; the newest is the most likely to
// be still in the hosting table's log (Exporter.RowsAt).
func (c *chooser) newestSame(i int, v *Version) *Version {
	vs := c.tables[i].Versions
	k, _ := slices.BinarySearchFunc(vs, v.Version, func(x Version, n uint64) int { return cmp.Compare(x.Version, n) })
	for k+1 < len(vs) && slices.Equal(vs[k+1].EndOffsets, v.EndOffsets) && slices.Equal(vs[k+1].Upstream, v.Upstream) {
		k++
	}
	return &vs[k]
}

// chooser is the state of one ChooseVersions search.
type chooser struct {
	tables []TableVersions
	deps   [][]int // per table, the named tables some of its versions read
	read   []bool  // read by another named table
	lasts  []int   // the tables no named table reads, in the order given
	// reasons holds, per last table, why its newest version fits no set;
	// fit whether one of its versions fits with what was chosen before.
	reasons []string
	fit     []bool
	tried   int
}

// search assigns versions to lasts[k:] and what they read, newest first,
// on top of chosen; it reports whether it found a full set (left in
// chosen).
func (c *chooser) search(k int, chosen []*Version) bool {
	if k == len(c.lasts) {
		return true
	}
	i := c.lasts[k]
	vs := c.tables[i].Versions
	for n := len(vs) - 1; n >= 0 && c.tried < chooseBudget; n-- {
		c.tried++
		try := slices.Clone(chosen)
		if reason := c.assign(try, i, &vs[n]); reason != "" {
			if n == len(vs)-1 && c.reasons[k] == "" {
				c.reasons[k] = fmt.Sprintf("%s (newest of the %d versions read of it)", reason, len(vs))
			}
			continue
		}
		c.fit[k] = true
		if c.search(k+1, try) {
			copy(chosen, try)
			return true
		}
	}
	if c.reasons[k] == "" {
		c.reasons[k] = fmt.Sprintf("no version of %q fits the versions chosen for the tables listed before it", c.tables[i].Topic)
	}
	return false
}

// assign chooses v for table i in chosen, and for every named table it
// reads the version it is derived from, recursively; it returns why that is
// not consistent ("" when it is).
func (c *chooser) assign(chosen []*Version, i int, v *Version) string {
	if have := chosen[i]; have != nil {
		if !slices.Equal(have.EndOffsets, v.EndOffsets) {
			return fmt.Sprintf("table %q would be at version %d and at version %d, whose end offsets differ (%v, %v)",
				c.tables[i].Topic, have.Version, v.Version, have.EndOffsets, v.EndOffsets)
		}
		if have.Version >= v.Version {
			return "" // the same rows; what it reads was checked
		}
	}
	chosen[i] = v
	for _, j := range c.deps[i] {
		up := c.tables[j].Topic
		var ref *changelogfmt.UpstreamVersion
		for k := range v.Upstream {
			u := &v.Upstream[k]
			if u.Topic != up {
				continue
			}
			if u.Version == 0 {
				return fmt.Sprintf("version %d of %q was cut before it had read a version of %q whole", v.Version, c.tables[i].Topic, up)
			}
			if !u.Exact {
				return fmt.Sprintf("version %d of %q holds all of version %d of %q and maybe part of the next (its checkpoint was not aligned on %q's versions: align: versions)",
					v.Version, c.tables[i].Topic, u.Version, up, up)
			}
			if ref != nil && ref.Version != u.Version {
				return fmt.Sprintf("version %d of %q is derived from versions %d and %d of %q (two jobs write it)",
					v.Version, c.tables[i].Topic, ref.Version, u.Version, up)
			}
			ref = u
		}
		if ref == nil {
			return fmt.Sprintf("version %d of %q names no version of %q it read", v.Version, c.tables[i].Topic, up)
		}
		uv := c.find(j, ref.Version)
		if uv == nil {
			return fmt.Sprintf("version %d of %q is derived from version %d of %q, which is not among the %d versions read of it",
				v.Version, c.tables[i].Topic, ref.Version, up, len(c.tables[j].Versions))
		}
		if reason := c.assign(chosen, j, uv); reason != "" {
			return reason
		}
	}
	return ""
}

// find returns table i's version number n, or nil.
func (c *chooser) find(i int, n uint64) *Version {
	vs := c.tables[i].Versions
	k, ok := slices.BinarySearchFunc(vs, n, func(v Version, n uint64) int { return cmp.Compare(v.Version, n) })
	if !ok {
		return nil
	}
	return &vs[k]
}

// Consistent is the newest consistent version of one part of a topology:
// tables linked by the upstream versions their versions name (directly or
// through other tables), each at the version ChooseVersions picks for them
// together, the choice a consistent read of all of them makes.
type Consistent struct {
	// Topics are the tables' changelog topics, in the order given to
	// ChooseConsistent.
	Topics []string
	// Versions are their versions, in the order of Topics; nil when no
	// consistent set exists (Err says why).
	Versions []Version
	Err      error
	// EventTimeMs is the newest source event time every table of the set
	// covers: the least EventTimeMs of Versions; 0 (unknown) when one of
	// them covers none.
	EventTimeMs int64
}

// Freshness is how far the set is behind its sources at now: now minus
// EventTimeMs (Freshness of a version); ok is false when it is unknown.
func (c *Consistent) Freshness(now time.Time) (time.Duration, bool) {
	return Freshness(now, &Version{EventTimeMs: c.EventTimeMs})
}

// ChooseConsistent splits tables into the parts of the topology they make
// (two tables are in one part when a version of one names the other as
// upstream) and chooses the newest consistent version of each part
// (ChooseVersions over its tables): the versions a consistent read naming
// every table of the part returns. Parts are in the order of their first
// table; a part none of whose sets fits, or with a table without versions,
// has Err and no Versions, and does not hold the others back.
func ChooseConsistent(tables []TableVersions) []Consistent {
	index := map[string]int{}
	for i, t := range tables {
		index[t.Topic] = i
	}
	// part[i] is the root of table i's part (union-find).
	part := make([]int, len(tables))
	for i := range part {
		part[i] = i
	}
	root := func(i int) int {
		for part[i] != i {
			part[i] = part[part[i]]
			i = part[i]
		}
		return i
	}
	for i, t := range tables {
		for _, v := range t.Versions {
			for _, u := range v.Upstream {
				if j, ok := index[u.Topic]; ok {
					ri, rj := root(i), root(j)
					part[max(ri, rj)] = min(ri, rj)
				}
			}
		}
	}
	var out []Consistent
	of := map[int]int{} // root → index in out
	var members [][]TableVersions
	for i, t := range tables {
		r := root(i)
		k, ok := of[r]
		if !ok {
			k = len(out)
			of[r] = k
			out = append(out, Consistent{})
			members = append(members, nil)
		}
		out[k].Topics = append(out[k].Topics, t.Topic)
		members[k] = append(members[k], t)
	}
	for k := range out {
		c := &out[k]
		c.Versions, c.Err = ChooseVersions(members[k], false)
		if c.Err != nil {
			continue
		}
		c.EventTimeMs = c.Versions[0].EventTimeMs
		for _, v := range c.Versions {
			if v.EventTimeMs <= 0 {
				c.EventTimeMs = 0
				break
			}
			c.EventTimeMs = min(c.EventTimeMs, v.EventTimeMs)
		}
	}
	return out
}
