package pipelines

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

func noEnv(string) (string, bool) { return "", false }

func load(t *testing.T, opts Options, paths ...string) []*Pipeline {
	t.Helper()
	fs, err := ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = noEnv
	}
	ps, err := Load(fs, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return ps
}

func exprOf(s string) *Expr { e := Expr(s); return &e }

// The issue's example loads into exactly this spec: every default filled.
func TestIssueExample(t *testing.T) {
	ps := load(t, Options{}, "testdata/valid/issue.yaml")
	if len(ps) != 1 {
		t.Fatalf("got %d jobs", len(ps))
	}
	want := &Spec{
		Job: JobSection{Name: "revenue", Parallelism: 2, MaxParallelism: 128},
		Sources: []Source{{Name: "kafka", Kafka: &KafkaSource{
			Connection: Connection{Brokers: []string{"embedded"}, ClientID: "ebbflow"},
			Topics:     []string{"orders"}, Group: "revenue", Format: FormatJSON,
			Schema:      []Field{{"user", agg.String}, {"region", agg.String}, {"amount", agg.Int64}, {"status", agg.String}},
			StartOffset: "earliest", IsolationLevel: "read_committed", OnError: OnErrorSkip, FetchMaxBytes: 50 << 20,
			Discovery: Duration(10 * time.Second), Align: AlignNone,
		}}},
		Transforms: []Transform{
			{Filter: exprOf(`status == "PAID"`)},
			{Map: []Assign{{Field: "amount_cents", Expr: "amount * 100"}}},
		},
		KeyBy: []string{"user"},
		Sinks: []Sink{{Name: "totals", Table: &TableSink{
			Name: "totals", PrimaryKey: []string{"user"}, Buckets: 8, OnDelete: "ignore", FlushInterval: FlushInterval(100 * time.Millisecond),
			Columns: []Column{
				{Name: "total", Agg: "sum", From: "amount_cents"},
				{Name: "orders", Agg: "count"},
				{Name: "max", Agg: "max", From: "amount_cents"},
				{Name: "region", Agg: "last_value", From: "region"},
			},
			Changelog: &Changelog{Connection: Connection{ClientID: "ebbflow"}, Topic: "totals-changelog", Format: "upsert-json", Mode: "committed"},
		}}},
		Checkpoint: Checkpoint{Interval: Duration(time.Second), Timeout: Duration(time.Minute), Retain: 3, Mode: "exactly_once"},
		Versions:   Versions{By: "checkpoint"},
		Restart:    Restart{MaxAttempts: 10, InitialBackoff: Duration(100 * time.Millisecond), MaxBackoff: Duration(30 * time.Second)},
		DataDir:    "./data", HTTP: HTTP{Address: "127.0.0.1:8081"},
		Logging:         Logging{Level: "info", Format: "text"},
		ShutdownTimeout: Duration(time.Minute),
	}
	if got := ps[0].Spec; !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("spec:\n got %s\nwant %s", g, w)
	}
	p := ps[0]
	if got, want := schemaString(p.Output), "user:string@0 region:string@1 amount:int64@2 status:string@3 amount_cents:int64@4"; got != want {
		t.Errorf("output schema %s, want %s", got, want)
	}
	if p.Width != 5 || len(p.Steps) != 2 {
		t.Errorf("width %d, %d steps", p.Width, len(p.Steps))
	}
	if got, want := tableString(p.Tables[0]), "key user:string@0; total=sum(amount_cents:int64@4):int64 orders=count(*):int64 max=max(amount_cents:int64@4):int64 region=last_value(region:string@1):string"; got != want {
		t.Errorf("table\n got %s\nwant %s", got, want)
	}
}

func TestMaxParallelismDefault(t *testing.T) {
	ps := load(t, Options{}, "testdata/valid/issue.yaml")
	if ps[0].Spec.Job.MaxParallelism != state.DefaultMaxParallelism {
		t.Errorf("max_parallelism default %d, runtime's %d", ps[0].Spec.Job.MaxParallelism, state.DefaultMaxParallelism)
	}
}

func schemaString(s *Schema) string {
	var b []string
	for _, f := range s.Fields {
		b = append(b, fieldString(f))
	}
	return strings.Join(b, " ")
}

func fieldString(f SchemaField) string {
	return f.Name + ":" + f.Type.String() + "@" + strconv.Itoa(f.Slot)
}

func tableString(t *Table) string {
	var key []string
	for _, f := range t.Key {
		key = append(key, fieldString(f))
	}
	s := "key " + strings.Join(key, ",") + ";"
	for _, c := range t.Columns {
		in := "*"
		if c.Input != nil {
			in = fieldString(*c.Input)
		}
		s += " " + c.Name + "=" + c.Func + "(" + in + "):" + c.Type.String()
		for k, v := range c.Params {
			s += "[" + k + "=" + v + "]"
		}
	}
	return s
}

// A datagen job and a second document: schemas derive from the generators,
// the steps move names and slots as documented.
func TestDatagenExample(t *testing.T) {
	ps := load(t, Options{}, "testdata/valid/datagen.yaml")
	if len(ps) != 2 {
		t.Fatalf("got %d jobs, want 2 (one per document)", len(ps))
	}
	p := ps[0]
	if got, want := schemaString(p.Input), "user_id:int64@0 page:string@1 latency:float64@2 seq:int64@3 price:decimal(6,2)@4 at:timestamp@5"; got != want {
		t.Errorf("input %s\nwant %s", got, want)
	}
	if got, want := schemaString(p.Output), "user_id:int64@0 endpoint:string@1 latency:float64@2 price:decimal(6,2)@4 at:timestamp@5 slow:bool@6 user:string@7"; got != want {
		t.Errorf("output %s\nwant %s", got, want)
	}
	wantTables := []string{
		"key endpoint:string@1; visitors=rbm32(user_id:int64@0):bytes approx=hll(user:string@7):bytes max_latency=max(latency:float64@2):float64 last_latency=last_value(latency:float64@2):float64 any_slow=bool_or(slow:bool@6):bool revenue=sum(price:decimal(6,2)@4):decimal(12,2) hits=count(*):int64",
		"key user:string@7; pages=collect_set(endpoint:string@1):set<string> trail=listagg(endpoint:string@1):string[delimiter=>] first_seen=min(at:timestamp@5):timestamp",
	}
	for i, w := range wantTables {
		if got := tableString(p.Tables[i]); got != w {
			t.Errorf("table %d\n got %s\nwant %s", i, got, w)
		}
	}
	g := p.Spec.Sources[0].Datagen
	if g.Seed != 42 || g.Rate != 500 || g.Count != 0 || g.Fields[1].Weights[0] != 6 || !g.Fields[5].Now ||
		*g.Fields[4].Type != agg.Decimal(6, 2) || g.Fields[4].Null != 0.1 || g.Fields[3].Sequence.Start != 100 || g.Fields[3].Sequence.Step != 2 {
		t.Errorf("datagen spec %+v", g)
	}
	if u := g.Fields[2].Uniform; !u.Min.IsFloat || u.Max.Float != 250 {
		t.Errorf("uniform %+v", u)
	}
	if p.Spec.Sinks[0].Name != "pages" || p.Spec.Sinks[1].Name != "users-sink" {
		t.Errorf("sink names %q %q", p.Spec.Sinks[0].Name, p.Spec.Sinks[1].Name)
	}
	q := ps[1]
	if q.Spec.Sources[0].Datagen.Topic != "generated" || q.Spec.Sources[0].Datagen.Count != 1000 || q.Spec.Sources[0].Datagen.Rate != 1000 {
		t.Errorf("second job %+v", q.Spec.Sources[0].Datagen)
	}
}

// --set overrides change values and add keys, typed by the spec.
func TestOverrides(t *testing.T) {
	ps := load(t, Options{Set: []string{
		"checkpoint.interval=250ms",
		"source.kafka.brokers=[a:9092, b:9092]",
		"transforms[0].filter=status != \"PAID\"",
		"sink.table.buckets=32",
		"logging={level: debug}",
		"job.name=other",
	}}, "testdata/valid/issue.yaml")
	s := ps[0].Spec
	if s.Checkpoint.Interval.Std() != 250*time.Millisecond || s.Checkpoint.Timeout.Std() != time.Minute {
		t.Errorf("checkpoint %+v", s.Checkpoint)
	}
	if !reflect.DeepEqual(s.Sources[0].Kafka.Brokers, []string{"a:9092", "b:9092"}) {
		t.Errorf("brokers %v", s.Sources[0].Kafka.Brokers)
	}
	if *s.Transforms[0].Filter != `status != "PAID"` || s.Sinks[0].Table.Buckets != 32 || s.Logging.Level != "debug" || s.Logging.Format != "text" {
		t.Errorf("spec %+v", s)
	}
	if s.Job.Name != "other" || s.Sources[0].Kafka.Group != "other" {
		t.Errorf("job name %q, group %q", s.Job.Name, s.Sources[0].Kafka.Group)
	}
}

func TestEnvSubstitution(t *testing.T) {
	env := map[string]string{"KAFKA_BROKERS": "k1:9092", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, c := range []struct{ in, want, err string }{
		{"${KAFKA_BROKERS}", "k1:9092", ""},
		{"x-${KAFKA_BROKERS:-d}-y", "x-k1:9092-y", ""},
		{"${MISSING:-def}", "def", ""},
		{"${EMPTY:-def}", "def", ""},
		{"${EMPTY}", "", ""},
		{"$${KAFKA_BROKERS}", "${KAFKA_BROKERS}", ""},
		{"a ${MISSING:-} b", "a  b", ""},
		{"${MISSING}", "", "MISSING is not set"},
		{"${1X}", "", "invalid variable name"},
		{"${OPEN", "", "unterminated"},
	} {
		got, err := expand(c.in, lookup)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("expand(%q) error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("expand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// Several files: each a job; names unique, shared tables consistent.
func TestSeveralFiles(t *testing.T) {
	job := func(file, name, table, col string, buckets int) File {
		return File{Name: file, Data: []byte(`
job: {name: ` + name + `}
source: {kafka: {topics: [t], schema: {k: string, v: int64}}}
sink: {table: {name: ` + table + `, primary_key: [k], buckets: ` + strconv.Itoa(buckets) + `, columns: {` + col + `: {agg: sum, from: v}}}}
`)}
	}
	ps, err := Load([]File{job("a.yaml", "a", "shared", "x", 4), job("b.yaml", "b", "shared", "y", 4)}, Options{LookupEnv: noEnv})
	if err != nil || len(ps) != 2 || ps[1].File != "b.yaml" {
		t.Fatalf("Load = %v, %v", ps, err)
	}
	_, err = Load([]File{job("a.yaml", "a", "shared", "x", 4), job("b.yaml", "a", "shared", "x", 8)}, Options{LookupEnv: noEnv})
	want := `b.yaml:2:13: job.name: job name "a" is also used in a.yaml
b.yaml:4:15: sink.table: table "shared": primary key and buckets differ from job "a"'s`
	var errs Errors
	if !errors.As(err, &errs) || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
	_, err = Load([]File{job("a.yaml", "a", "shared", "x", 4), job("b.yaml", "b", "shared", "x", 4)}, Options{LookupEnv: noEnv})
	if err == nil || err.Error() != `b.yaml:4:73: sink.table.columns.x: table "shared": column "x" is also written by job "a"` {
		t.Errorf("overlap: %v", err)
	}
	_, err = Load([]File{{Name: "empty.yaml", Data: []byte("# nothing\n")}}, Options{LookupEnv: noEnv})
	if err == nil || err.Error() != "empty.yaml:1:1: the file holds no job" {
		t.Errorf("empty file: %v", err)
	}
}

// A password is never printed, in a spec dump or JSON.
func TestSecretMasked(t *testing.T) {
	s := SASL{Mechanism: "PLAIN", Username: "u", Password: "hunter2"}
	text, err := s.Password.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v %+v", s, &s), string(text)} {
		if strings.Contains(out, "hunter2") {
			t.Errorf("secret printed: %s", out)
		}
	}
}

func TestRuntimeOptions(t *testing.T) {
	s := load(t, Options{Set: []string{"restart.max_attempts=0", "checkpoint.mode=at_least_once", "checkpoint.min_pause=2s"}}, "testdata/valid/issue.yaml")[0].Spec
	got := s.RuntimeOptions()
	want := runtime.Options{Name: "revenue", DataDir: "./data", Parallelism: 2, MaxParallelism: 128,
		Checkpoint: runtime.CheckpointOptions{Interval: time.Second, MinPause: 2 * time.Second, Timeout: time.Minute, Retain: 3, Mode: barrier.AtLeastOnce},
		Restart:    runtime.RestartOptions{MaxAttempts: -1, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 30 * time.Second}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if s := load(t, Options{}, "testdata/valid/issue.yaml")[0].Spec.RuntimeOptions(); s.Restart.MaxAttempts != 10 || s.Checkpoint.Mode != barrier.ExactlyOnce ||
		s.Checkpoint.AlignmentTimeout != 0 {
		t.Errorf("defaults: %+v", s)
	}
	if s := load(t, Options{Set: []string{"checkpoint.alignment_timeout=2s"}}, "testdata/valid/issue.yaml")[0].Spec.RuntimeOptions(); s.Checkpoint.AlignmentTimeout != 2*time.Second {
		t.Errorf("alignment_timeout=2s: %+v", s.Checkpoint)
	}
}

// Overrides reach every document, each with its own copy of the value, and
// refuse to turn a list into a mapping.
func TestOverridesSeveralJobs(t *testing.T) {
	ps := load(t, Options{Set: []string{"logging={level: debug}", "logging.format=json"}}, "testdata/valid/datagen.yaml")
	for _, p := range ps {
		if p.Spec.Logging != (Logging{Level: "debug", Format: "json"}) {
			t.Errorf("%s: logging %+v", p.Spec.Job.Name, p.Spec.Logging)
		}
	}
	fs, err := ReadFiles("testdata/valid/datagen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(fs, Options{LookupEnv: noEnv, Set: []string{"sink.table.buckets=2"}})
	if err == nil || err.Error() != "--set:1:6: sink: is a list: write sink[i].table" {
		t.Errorf("got %v", err)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	p := load(t, Options{}, "testdata/valid/anchors.yaml")[0]
	a, b := p.Spec.Sinks[0].Table, p.Spec.Sinks[1].Table
	if a.Name != "a" || b.Name != "b" || b.Buckets != 4 || !reflect.DeepEqual(b.PrimaryKey, []string{"user"}) {
		t.Errorf("tables %+v %+v", a, b)
	}
	if got := tableString(p.Tables[1]); got != "key user:string@0; total=sum(amount:int64@1):int64 top=max(amount:int64@1):int64" {
		t.Errorf("table b: %s", got)
	}
	if !reflect.DeepEqual(b.Changelog.Brokers, []string{"k1:9092", "k2:9092"}) || b.Changelog.Topic != "anchors-b-changelog" {
		t.Errorf("changelog of b %+v", b.Changelog)
	}
}

// A changelog source gets a kind slot after its fields, before the fields
// that maps add; the transformer leaves it alone.
func TestChangelogKindSlot(t *testing.T) {
	p := load(t, Options{}, "testdata/valid/changelog.yaml")[0]
	if p.KindSlot != 4 || p.Width != 6 || p.Steps[1].Assigns[0].Field.Slot != 5 {
		t.Fatalf("kind slot %d, width %d, cents in slot %d; want 4, 6, 5", p.KindSlot, p.Width, p.Steps[1].Assigns[0].Field.Slot)
	}
	r := Row{"ada", "eu", int64(7), int64(2), runtime.RowUpdateBefore, nil}
	if keep, err := p.NewTransformer().Apply(r); !keep || err != nil || r.Kind(p.KindSlot) != runtime.RowUpdateBefore || r[5] != int64(700) {
		t.Fatalf("Apply = %v, %v; row %v", keep, err, r)
	}
	plain := load(t, Options{}, "testdata/valid/issue.yaml")[0]
	if plain.KindSlot != -1 || (Row{}).Kind(plain.KindSlot) != runtime.RowInsert {
		t.Fatalf("plain job: kind slot %d", plain.KindSlot)
	}
}
