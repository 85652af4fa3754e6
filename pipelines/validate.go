package pipelines

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"
)

var (
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostPattern  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
)

// CheckName checks the name of a job or a table, which names folders of the
// data directory: letters, digits, '.', '_' and '-', starting with a letter
// or digit (so never "..", and never a path).
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid name (letters, digits, '.', '_', '-')", name)
	}
	return nil
}

// validator checks what the decoder cannot see alone (fields flowing through
// the steps, types, cross-key rules), fills the computed defaults and
// builds the Pipeline. Errors go to the decoder, positioned by path.
type validator struct {
	*decoder
	lines []string // the file's lines, to place errors inside block scalars
	spec  *Spec
	p     *Pipeline
	// known is false when the input fields could not be determined: the
	// checks of fields downstream are then skipped rather than repeated.
	known bool
	// broken holds the fields whose map expression failed: naming them
	// later is not reported again.
	broken map[string]bool
	// changelog is the format of the first source reading a changelog, or
	// "": the table columns must then retract.
	changelog Format
}

// at returns the node of path, or of its nearest ancestor that has one.
func (v *validator) at(path string) *yaml.Node {
	for {
		if n, ok := v.values[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return v.values[""]
		}
		path = path[:i]
	}
}

// keyAt returns the key node of path (for errors about a name), else at.
func (v *validator) keyAt(path string) *yaml.Node {
	if n, ok := v.keys[path]; ok {
		return n
	}
	return v.at(path)
}

// fail records a problem at path, unless path already has one (the first
// error usually explains the next).
func (v *validator) fail(path, format string, args ...any) {
	if v.bad[path] {
		return
	}
	v.errorf(v.at(path), path, format, args...)
}

// given reports whether the file has a value at path.
func (v *validator) given(path string) bool {
	_, ok := v.values[path]
	return ok
}

// elem is the path of element i of a "one" list: path[i], or path itself
// when the file gave one element without a list.
func (v *validator) elem(path string, i int) string {
	if n := v.values[path]; n != nil && n.Kind == yaml.SequenceNode {
		return fmt.Sprintf("%s[%d]", path, i)
	}
	return path
}

func (v *validator) validate() *Pipeline {
	s := v.spec
	v.p = &Pipeline{File: v.file, Spec: s, KindSlot: -1, where: v}
	if err := CheckName(s.Job.Name); s.Job.Name != "" && err != nil {
		v.fail("job.name", "%v", err)
	}
	if s.Job.Parallelism > s.Job.MaxParallelism {
		v.fail("job.parallelism", "parallelism %d exceeds max_parallelism %d", s.Job.Parallelism, s.Job.MaxParallelism)
	}
	if s.HTTP.Address != "" {
		v.hostPort("http.address", s.HTTP.Address)
	}
	for i, h := range s.HTTP.AllowedHosts {
		if !hostPattern.MatchString(h) {
			v.fail(fmt.Sprintf("http.allowed_hosts[%d]", i), "%q is not a host name (no port, no scheme)", h)
		}
	}
	if s.Restart.InitialBackoff > s.Restart.MaxBackoff {
		v.fail("restart.initial_backoff", "initial_backoff %s exceeds max_backoff %s", s.Restart.InitialBackoff, s.Restart.MaxBackoff)
	}
	v.sources()
	cur := v.p.Input
	for i := range s.Transforms {
		cur = v.transform(fmt.Sprintf("transforms[%d]", i), &s.Transforms[i], cur)
	}
	v.p.Output = cur
	v.fieldList("key_by", s.KeyBy, cur)
	v.sinks()
	return v.p
}

// sources derives the input schema: every source must give the same fields.
func (v *validator) sources() {
	s := v.spec
	v.p.Input = &Schema{}
	v.known = len(s.Sources) > 0
	kinds := map[string]int{}
	for _, src := range s.Sources {
		kinds[src.Kind()]++
	}
	var first []Field
	names := map[string]bool{}
	for i := range s.Sources {
		src := &s.Sources[i]
		path := v.elem("source", i)
		if src.Name == "" {
			src.Name = src.Kind()
			if kinds[src.Kind()] > 1 {
				src.Name = fmt.Sprintf("%s-%d", src.Kind(), i)
			}
		}
		v.uniqueName(path+".name", src.Name, names)
		var fields []Field
		ok := false
		switch {
		case src.Kafka != nil:
			fields, ok = v.kafka(path+".kafka", src.Kafka)
		case src.Datagen != nil:
			fields, ok = v.datagen(path+".datagen", src.Datagen)
		}
		if !ok {
			v.known = false
			continue
		}
		if first == nil {
			first = fields
			for j, f := range fields {
				v.p.Input.Fields = append(v.p.Input.Fields, SchemaField{Name: f.Name, Type: f.Type, Slot: j})
			}
			continue
		}
		if d := diffFields(first, fields); d != "" {
			v.fail(path, "the sources of a job must give the same fields: %s", d)
		}
	}
	v.p.Width = len(v.p.Input.Fields)
	for _, src := range s.Sources {
		if src.Kafka != nil && src.Kafka.Format.Changelog() {
			v.changelog = src.Kafka.Format
			v.p.KindSlot = v.p.Width
			v.p.Width++
			break
		}
	}
}

func (v *validator) uniqueName(path, name string, seen map[string]bool) {
	if seen[name] {
		v.fail(path, "name %q is used twice", name)
	}
	seen[name] = true
}

func diffFields(want, got []Field) string {
	var d []string
	for _, w := range want {
		i := slices.IndexFunc(got, func(g Field) bool { return g.Name == w.Name })
		switch {
		case i < 0:
			d = append(d, fmt.Sprintf("no field %q", w.Name))
		case got[i].Type != w.Type:
			d = append(d, fmt.Sprintf("field %q is %s, not %s", w.Name, got[i].Type, w.Type))
		}
	}
	for _, g := range got {
		if !slices.ContainsFunc(want, func(w Field) bool { return w.Name == g.Name }) {
			d = append(d, fmt.Sprintf("extra field %q", g.Name))
		}
	}
	return strings.Join(d, ", ")
}

func (v *validator) kafka(path string, k *KafkaSource) ([]Field, bool) {
	v.connection(path, &k.Connection)
	switch {
	case k.TopicPattern != "" && k.Topics != nil:
		v.fail(path+".topic_pattern", "give topics or topic_pattern, not both")
	case k.TopicPattern != "":
		if _, err := regexp.Compile(k.TopicPattern); err != nil {
			v.fail(path+".topic_pattern", "%v", err)
		}
	case len(k.Topics) == 0:
		v.fail(path+".topics", "needs at least one topic, or a topic_pattern")
	}
	for i, t := range k.Topics {
		if t == "" {
			v.fail(fmt.Sprintf("%s.topics[%d]", path, i), "a topic name is empty")
		}
	}
	if k.Group == "" {
		k.Group = v.spec.Job.Name
	}
	switch {
	case k.OnError == OnErrorDeadLetter && k.DeadLetterTopic == "":
		v.fail(path+".on_error", "on_error: dead_letter needs dead_letter_topic")
	case k.OnError != OnErrorDeadLetter && k.DeadLetterTopic != "":
		v.fail(path+".dead_letter_topic", "is used only with on_error: dead_letter")
	}
	ok := v.schemaFields(path+".schema", k.Schema)
	switch k.Format {
	case FormatJSON, FormatUpsertJSON, FormatDebeziumJSON:
		if len(k.Schema) == 0 {
			if !v.given(path + ".schema") {
				v.fail(path, "format %s needs a schema (field name to type)", k.Format)
			}
			return nil, false
		}
	case FormatRaw:
		if len(k.Schema) == 0 {
			k.Schema = []Field{{Name: "value", Type: agg.String}}
		}
		for _, f := range k.Schema {
			if f.Name != "key" && f.Name != "value" || f.Type != agg.String && f.Type != agg.Bytes {
				v.fail(path+".schema."+f.Name, "format raw gives only key and value, as string or bytes")
				ok = false
			}
		}
	}
	return k.Schema, ok
}

func (v *validator) connection(path string, c *Connection) {
	for i, b := range c.Brokers {
		if b != "embedded" {
			v.hostPort(fmt.Sprintf("%s.brokers[%d]", path, i), b)
		}
	}
	if c.TLS != nil && (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		v.fail(path+".tls", "cert_file and key_file go together")
	}
}

// hostPort checks a network address.
func (v *validator) hostPort(path, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		v.fail(path, "%q is not host:port", addr)
	}
}

// schemaFields checks declared fields: identifiers, of a type a record can
// hold.
func (v *validator) schemaFields(path string, fs []Field) bool {
	ok := true
	for _, f := range fs {
		if !v.ident(path+"."+f.Name, f.Name) {
			ok = false
		}
		if f.Type.Kind == agg.KindStringSet {
			v.fail(path+"."+f.Name, "type %s is for table columns, not record fields", f.Type)
			ok = false
		}
	}
	return ok
}

// ident checks a field name that expressions must be able to refer to.
func (v *validator) ident(path, name string) bool {
	if identPattern.MatchString(name) {
		return true
	}
	v.errorf(v.keyAt(path), path, "field name %q is not an identifier (letters, digits and _, not starting with a digit)", name)
	return false
}

func (v *validator) datagen(path string, g *DatagenSource) ([]Field, bool) {
	if g.Topic != "" {
		v.connection(path+".kafka", &g.Kafka)
	}
	ok := len(g.Fields) > 0
	if !ok {
		v.fail(path+".fields", "needs at least one field")
	}
	fields := make([]Field, 0, len(g.Fields))
	for i := range g.Fields {
		f := &g.Fields[i]
		fp := path + ".fields." + f.Name
		t, good := v.generator(fp, f)
		ok = v.ident(fp, f.Name) && good && ok
		fields = append(fields, Field{Name: f.Name, Type: t})
	}
	return fields, ok
}

// generator checks one generated field and returns its type.
func (v *validator) generator(path string, f *GenField) (agg.Type, bool) {
	var t agg.Type
	var allowed []agg.Kind
	switch {
	case f.Sequence != nil:
		t, allowed = agg.Int64, []agg.Kind{agg.KindInt64, agg.KindFloat64, agg.KindDecimal, agg.KindString}
	case f.Uniform != nil:
		t, allowed = agg.Int64, []agg.Kind{agg.KindInt64, agg.KindFloat64, agg.KindDecimal}
		if f.Uniform.Min.IsFloat || f.Uniform.Max.IsFloat {
			t, allowed = agg.Float64, []agg.Kind{agg.KindFloat64, agg.KindDecimal}
		}
		if v.given(path+".uniform.min") && v.given(path+".uniform.max") && f.Uniform.Min.Float > f.Uniform.Max.Float {
			v.fail(path+".uniform", "min %v exceeds max %v", f.Uniform.Min.Float, f.Uniform.Max.Float)
			return t, false
		}
	case f.OneOf != nil:
		t, allowed = agg.String, []agg.Kind{agg.KindString, agg.KindInt64, agg.KindFloat64, agg.KindBool,
			agg.KindDecimal, agg.KindTimestamp, agg.KindBytes}
	case f.Now:
		t, allowed = agg.Timestamp, []agg.Kind{agg.KindTimestamp}
	default:
		if v.given(path + ".now") {
			v.fail(path+".now", "now: false generates nothing; write now: true or another generator")
		}
		return t, false
	}
	if f.Type != nil {
		if !slices.Contains(allowed, f.Type.Kind) {
			v.fail(path+".type", "this generator cannot give %s values", f.Type)
			return t, false
		}
		t = *f.Type
	}
	ok := true
	if u := f.Uniform; u != nil && t.Kind == agg.KindDecimal {
		for _, b := range []struct {
			key string
			n   Number
		}{{"min", u.Min}, {"max", u.Max}} {
			if _, err := agg.Conform(t, agg.DecimalValue(decimal.NewFromFloat(b.n.Float).Round(int32(t.Scale)))); err != nil {
				v.fail(path+".uniform."+b.key, "%v does not fit %s", b.n.Float, t)
				ok = false
			}
		}
	}
	if f.OneOf != nil {
		if len(f.OneOf) == 0 {
			v.fail(path+".one_of", "needs at least one value")
			ok = false
		}
		for i, s := range f.OneOf {
			if err := checkLiteral(t, s); err != nil {
				v.fail(fmt.Sprintf("%s.one_of[%d]", path, i), "%v", err)
				ok = false
			}
		}
	}
	if f.Weights != nil {
		sum := 0.0
		for _, w := range f.Weights {
			sum += w
			if w < 0 {
				sum = -1
				break
			}
		}
		switch {
		case f.OneOf == nil:
			v.fail(path+".weights", "weights go with one_of")
		case len(f.Weights) != len(f.OneOf):
			v.fail(path+".weights", "has %d weights for %d one_of values", len(f.Weights), len(f.OneOf))
		case sum <= 0:
			v.fail(path+".weights", "weights must not be negative and must not all be zero")
		}
	}
	return t, ok
}

// checkLiteral checks that s reads as a value of type t.
func checkLiteral(t agg.Type, s string) error {
	v, err := literal(t, s)
	if d, ok := v.(decimal.Decimal); ok && err == nil {
		_, err = agg.Conform(t, agg.DecimalValue(d))
	}
	if err != nil {
		return fmt.Errorf("%q is not of type %s", s, t)
	}
	return nil
}

// transform checks and compiles one step against the schema before it and
// returns the schema after it.
func (v *validator) transform(path string, t *Transform, in *Schema) *Schema {
	step := &Step{Out: in}
	switch {
	case t.Filter != nil:
		step.Filter = v.compile(path+".filter", string(*t.Filter), in, true)
	case t.Map != nil:
		if len(t.Map) == 0 {
			v.fail(path+".map", "needs at least one field")
		}
		for _, a := range t.Map {
			ap := path + ".map." + a.Field
			prog := v.compile(ap, string(a.Expr), in, false)
			if !v.ident(ap, a.Field) || prog == nil {
				v.broken[a.Field] = true
				continue
			}
			f := SchemaField{Name: a.Field, Type: prog.Type(), Slot: v.p.Width}
			v.p.Width++
			step.Out = step.Out.with(f)
			step.Assigns = append(step.Assigns, Assignment{Field: f, Prog: prog})
		}
	case t.Drop != nil:
		if v.fieldList(path+".drop", t.Drop, in) {
			step.Out = &Schema{}
			for _, f := range in.Fields {
				if !slices.Contains(t.Drop, f.Name) {
					step.Out.Fields = append(step.Out.Fields, f)
				}
			}
		}
	case t.Project != nil:
		if v.fieldList(path+".project", t.Project, in) {
			step.Out = &Schema{}
			for _, name := range t.Project {
				f, _ := in.Field(name)
				step.Out.Fields = append(step.Out.Fields, f)
			}
		}
	case t.Rename != nil:
		for _, r := range t.Rename {
			rp := path + ".rename." + r.From
			f, ok := v.field(rp, r.From, step.Out, true, "")
			if !ok || !v.ident(rp, r.To) {
				continue
			}
			if _, taken := step.Out.Field(r.To); taken {
				v.fail(rp, "cannot rename %q to %q: that field exists", r.From, r.To)
				continue
			}
			out := &Schema{Fields: slices.Clone(step.Out.Fields)}
			i := slices.IndexFunc(out.Fields, func(g SchemaField) bool { return g.Name == f.Name })
			out.Fields[i].Name = r.To
			step.Out = out
		}
	}
	v.p.Steps = append(v.p.Steps, step)
	return step.Out
}

// fieldList checks a list of distinct field names that must exist in s.
func (v *validator) fieldList(path string, names []string, s *Schema) bool {
	if names != nil && len(names) == 0 {
		v.fail(path, "needs at least one field")
		return false
	}
	ok := true
	for i, n := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		if slices.Index(names, n) < i {
			v.fail(p, "field %q is listed twice", n)
			ok = false
		}
		if _, found := v.field(p, n, s, false, ""); !found {
			ok = false
		}
	}
	return ok
}

// field looks up name in s, reporting an unknown field at path (at its key
// when onKey).
func (v *validator) field(path, name string, s *Schema, onKey bool, hint string) (SchemaField, bool) {
	if !v.known {
		return SchemaField{}, false
	}
	f, ok := s.Field(name)
	if !ok && !v.broken[name] {
		n := v.at(path)
		if onKey {
			n = v.keyAt(path)
		}
		v.errorf(n, path, "no field %q here%s (fields: %s)%s", name, suggest(name, s.Names()), strings.Join(s.Names(), ", "), hint)
	}
	return f, ok
}

// compile compiles an expression, placing its errors inside the file.
func (v *validator) compile(path, src string, in *Schema, filter bool) *Program {
	if !v.known {
		return nil
	}
	prog, err := compile(src, in, filter)
	if err == nil {
		return prog
	}
	var ee *exprError
	if !errors.As(err, &ee) {
		v.fail(path, "%v", err)
		return nil
	}
	if v.broken[ee.Unknown] {
		return nil
	}
	n := v.at(path)
	pos := &yaml.Node{Line: n.Line + ee.Line - 1, Column: n.Column + ee.Column}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		pos.Line = n.Line + ee.Line
		pos.Column = v.indent(n.Line+1) + ee.Column + 1 // the block's indentation is its first line's
	case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
		pos.Column++
	}
	if ee.Line > 1 && n.Style != yaml.LiteralStyle && n.Style != yaml.FoldedStyle {
		pos.Column = ee.Column + 1 // a flow scalar over several lines: the column is a guess
	}
	if v.overrides[n] {
		v.overrides[pos] = true
	}
	v.errorf(pos, path, "%s", ee.Msg)
	return nil
}

// indent returns the number of leading spaces of the 1-based line.
func (v *validator) indent(line int) int {
	if line < 1 || line > len(v.lines) {
		return 0
	}
	l := v.lines[line-1]
	return len(l) - len(strings.TrimLeft(l, " "))
}

func (v *validator) sinks() {
	names := map[string]bool{}
	for _, src := range v.spec.Sources {
		names[src.Name] = true
	}
	for i := range v.spec.Sinks {
		s := &v.spec.Sinks[i]
		path := v.elem("sink", i)
		if s.Table == nil {
			continue
		}
		if s.Name == "" {
			s.Name = s.Table.Name
		}
		v.uniqueName(path+".name", s.Name, names)
		v.p.Tables = append(v.p.Tables, v.table(path+".table", s.Table))
	}
}

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
		var conn *Connection
		switch {
		case src.Kafka != nil:
			conn = &src.Kafka.Connection
		case src.Datagen != nil && src.Datagen.Topic != "":
			conn = &src.Datagen.Kafka
		default:
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
