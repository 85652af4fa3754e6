package pipelines

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

func (v *validator) table(path string, t *TableSink) *Table {
	out := v.p.Output
	tab := &Table{Spec: t, path: path}
	if err := CheckName(t.Name); t.Name != "" && err != nil {
		v.fail(path+".name", "%v", err)
	}
	if v.fieldList(path+".primary_key", t.PrimaryKey, out) {
		for i, name := range t.PrimaryKey {
			f, _ := out.Field(name)
			if f.Type.Kind == agg.KindStringSet {
				v.fail(fmt.Sprintf("%s.primary_key[%d]", path, i), "a %s field cannot be a key", f.Type)
			}
			tab.Key = append(tab.Key, f)
		}
	}
	if kb := v.spec.KeyBy; kb != nil && t.PrimaryKey != nil && !slices.Equal(kb, t.PrimaryKey) {
		v.fail(path+".primary_key", "primary_key [%s] differs from key_by [%s]; the table's input is partitioned by its primary key",
			strings.Join(t.PrimaryKey, ", "), strings.Join(kb, ", "))
	}
	for i := range t.Columns {
		if c, ok := v.column(path+".columns."+t.Columns[i].Name, &t.Columns[i], t.PrimaryKey); ok {
			tab.Columns = append(tab.Columns, c)
		}
	}
	if w := t.Window; w != nil {
		tab.Window = v.window(path+".window", t, tab.Columns, out)
	}
	if t.FlushInterval == FlushAtCheckpoint && v.spec.Checkpoint.Interval == 0 {
		v.fail(path+".flush_interval", "checkpoint needs periodic checkpoints (checkpoint.interval is 0s: the table would see its rows at the end only)")
	}
	if c := t.Changelog; c != nil {
		v.connection(path+".changelog", &c.Connection)
		if len(c.Brokers) == 0 {
			v.changelogCluster(path+".changelog", c)
		}
		if c.TransactionalID != "" && !namePattern.MatchString(c.TransactionalID) {
			v.fail(path+".changelog.transactional_id", "%q is not a valid transactional id (letters, digits, '.', '_', '-')", c.TransactionalID)
		}
		if c.Topic == "" {
			c.Topic = v.spec.Job.Name + "-" + t.Name + "-changelog"
		}
	}
	return tab
}

// changelogCluster gives a changelog without brokers the cluster of the
// job's sources: the one Kafka cluster that every source reading or writing
// Kafka uses (its brokers, and TLS and SASL unless the changelog sets its
// own), so that the changelog lands where the data comes from. A job whose
// sources use no cluster, or only the embedded broker, keeps the embedded
// broker; sources on different clusters make the brokers required.
func (v *validator) changelogCluster(path string, c *Changelog) {
	var from *Connection
	var fromName string
	for i := range v.spec.Sources {
		src := &v.spec.Sources[i]
		k := src.kind()
		if k == nil {
			continue
		}
		conn := k.cluster(src)
		if conn == nil {
			continue
		}
		if from == nil {
			from, fromName = conn, src.Name
			continue
		}
		if !conn.sameCluster(from) {
			v.fail(path, "the job's sources use different Kafka clusters (source %q: %s, source %q: %s): set the changelog's brokers",
				fromName, from.Cluster(), src.Name, conn.Cluster())
			return
		}
	}
	if from == nil || from.Embedded() {
		return
	}
	c.Brokers = slices.Clone(from.Brokers)
	if c.TLS == nil && c.SASL == nil {
		c.TLS, c.SASL = from.TLS, from.SASL
	}
}

func (v *validator) column(path string, c *Column, key []string) (TableColumn, bool) {
	ok := v.ident(path, c.Name)
	if slices.Contains(key, c.Name) {
		v.errorf(v.keyAt(path), path, "column %q is also in primary_key", c.Name)
		ok = false
	}
	fn := agg.Normalize(c.Agg)
	if !slices.Contains(agg.Names(), fn) {
		v.fail(path+".agg", "unknown aggregate %q%s", c.Agg, suggest(c.Agg, agg.Names()))
		return TableColumn{}, false
	}
	col := TableColumn{Name: c.Name, Func: fn}
	if c.From == "" && fn != "count" {
		c.From = c.Name
	}
	var in *agg.Type
	if c.From != "" {
		fromPath := path + ".from"
		if !v.given(fromPath) {
			fromPath = path // from defaults to the column's name
		}
		hint := ""
		if fromPath == path {
			hint = "; from: defaults to the column's name"
		}
		f, found := v.field(fromPath, c.From, v.p.Output, fromPath == path, hint)
		if !found {
			return TableColumn{}, false
		}
		col.Input, in = &f, &f.Type
	}
	t, err := columnType(fn, in, c.Type)
	if err != nil {
		where := path + ".type"
		if c.Type == nil {
			where = path + ".agg"
		}
		v.fail(where, "%v", err)
		return TableColumn{}, false
	}
	f, err := agg.New(fn, t, c.Params)
	if err != nil {
		var pe *agg.ParamError
		var te *agg.TypeError
		switch {
		case errors.As(err, &pe):
			v.fail(path+".params", "%s", pe.Reason())
		case errors.As(err, &te):
			v.fail(path+".agg", "%s", te.Reason())
		default:
			v.fail(path+".agg", "%v", err)
		}
		return TableColumn{}, false
	}
	if v.changelog != "" && !f.CanRetract() {
		v.fail(path+".agg", "%s cannot retract, and the source reads a changelog (format %s) whose updates and deletes retract; functions that can, for %s: %s",
			fn, v.changelog, t, strings.Join(retracting(t), ", "))
		return TableColumn{}, false
	}
	col.Type, col.Params = t, f.Params()
	return col, ok
}

// retracting lists the functions that can retract into a column of type t.
func retracting(t agg.Type) []string {
	var out []string
	for _, name := range agg.Names() {
		if f, err := agg.New(name, t, nil); err == nil && f.CanRetract() {
			out = append(out, name)
		}
	}
	return out
}

// columnType is the type of a column of function fn fed with fields of
// type in (nil: a count of records), or of the declared type. Most
// functions store their input's type; count stores int64 whatever it counts,
// collect_set gathers strings into a set, and the sketches take ids (rbm32,
// rbm64: int64; hll: string or int64) or serialized sketches (bytes) into a
// bytes column.
func columnType(fn string, in, declared *agg.Type) (agg.Type, error) {
	var want agg.Type
	var accepts []agg.Kind
	switch fn {
	case "count":
		return fixedType(agg.Int64, declared)
	case "collect_set":
		want, accepts = agg.StringSet, []agg.Kind{agg.KindString}
	case "rbm32", "rbm64":
		want, accepts = agg.Bytes, []agg.Kind{agg.KindInt64, agg.KindBytes}
	case "hll":
		want, accepts = agg.Bytes, []agg.Kind{agg.KindString, agg.KindInt64, agg.KindBytes}
	default:
		if declared == nil {
			return *in, nil
		}
		if !widens(*in, *declared) {
			return agg.Type{}, fmt.Errorf("a %s field cannot be stored in a %s column", *in, *declared)
		}
		return *declared, nil
	}
	if !slices.Contains(accepts, in.Kind) {
		names := make([]string, len(accepts))
		for i, k := range accepts {
			names[i] = k.String()
		}
		return agg.Type{}, fmt.Errorf("%s does not accept %s (accepts %s)", fn, *in, strings.Join(names, ", "))
	}
	return fixedType(want, declared)
}

func fixedType(t agg.Type, declared *agg.Type) (agg.Type, error) {
	if declared != nil && *declared != t {
		return agg.Type{}, fmt.Errorf("the column's type is %s, not %s", t, *declared)
	}
	return t, nil
}

// widens reports whether a column of type to can store the values of a
// field of type from: the same type, int64 into float64 (rounded beyond
// 2^53) or into a decimal with 19 integer digits, a decimal into a wider one.
func widens(from, to agg.Type) bool {
	switch {
	case from == to:
		return true
	case from.Kind == agg.KindInt64:
		return to.Kind == agg.KindFloat64 || to.Kind == agg.KindDecimal && to.Precision-to.Scale >= 19
	case from.Kind == agg.KindDecimal && to.Kind == agg.KindDecimal:
		return to.Scale >= from.Scale && to.Precision-to.Scale >= from.Precision-from.Scale
	}
	return false
}

// window checks a table's window: a timestamp field, a length or a gap in
// whole milliseconds, its emit mode and late policy (lateness), and no field or
// column already called window_start or window_end.
func (v *validator) window(path string, t *TableSink, cols []TableColumn, out *Schema) *TableWindow {
	w := t.Window
	windows, sized := v.windowSize(path, w)
	gap, gapped := v.windowGap(path, w, cols)
	retain, retained := v.windowRetain(path, w)
	ok := sized && gapped && retained
	f, found := out.Field(w.On)
	switch {
	case w.On == "":
	case !found:
		v.fail(path+".on", "no field %q after the transforms", w.On)
		ok = false
	case f.Type != agg.Timestamp:
		v.fail(path+".on", "field %q has type %s; a window needs a timestamp", w.On, f.Type)
		ok = false
	}
	tw := &TableWindow{Size: windows.Size, Slide: windows.Slide, Gap: gap, Retain: retain, On: f,
		Final: w.Emit == EmitFinal, Lateness: w.AllowedLateness.Std(), Late: w.Late}
	if !v.lateness(path, tw) || !v.windowRetainLateness(path, tw) {
		ok = false
	}
	for i, name := range t.PrimaryKey {
		if name == WindowStart || name == WindowEnd {
			v.fail(fmt.Sprintf("%s.primary_key[%d]", strings.TrimSuffix(path, ".window"), i), "%s is the window's own key column", name)
			ok = false
		}
	}
	for _, c := range t.Columns {
		if c.Name == WindowStart || c.Name == WindowEnd {
			v.fail(strings.TrimSuffix(path, ".window")+".columns."+c.Name, "%s is the window's own key column", c.Name)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return tw
}
