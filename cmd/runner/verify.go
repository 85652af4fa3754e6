package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

type verifyFlags struct {
	dataDirFlags
	table    string
	maxDiffs int
	timeout  time.Duration
	chaos    chaosFlags
}

func newVerifyCmd() *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{Use: "verify -f job.yaml [--table T] [--chaos N]",
		Short: "Recompute a stopped job's table from its input and compare it with the table and its committed changelog (exit 4 on a difference); --chaos N: first run the job under N SIGKILLs in a fresh data directory",
		Args:  noArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if len(f.files) == 0 {
				return usageErr("verify needs the job file: give it with -f")
			}
			if err := f.resolve(); err != nil {
				return err
			}
			if len(f.jobs) != 1 {
				return usageErr("verify checks one job: the files hold %d", len(f.jobs))
			}
			var err error
			if f.table, err = f.tableName(f.table); err != nil {
				return err
			}
			if f.maxDiffs < 0 {
				return usageErr("--max-diffs %d: want 0 or more", f.maxDiffs)
			}
			return checkName("table", f.table)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			if cmd.Flags().Changed("chaos") {
				if cmd.Flags().Changed("data-dir") {
					f.chaos.dir = f.dataDir
				}
				return chaos(ctx, cmd.OutOrStdout(), &f)
			}
			return verify(ctx, cmd.OutOrStdout(), f.dataDir, f.jobs[0], f.table, f.maxDiffs)
		}}
	f.add(cmd, "f")
	fl := cmd.Flags()
	fl.StringVar(&f.table, "table", "", "the table to verify (default: the job's table, when it has one)")
	fl.IntVar(&f.maxDiffs, "max-diffs", 20, "list at most this many differing keys (the counts cover all)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.chaos.add(cmd)
	return cmd
}

// verify recomputes table of job p from its input up to what the job's
// latest completed checkpoint in dataDir covers, and compares it with the
// table and with its changelog topic (read_committed). It holds the data
// directory's lock: the job must be stopped, and its table hold exactly
// what that checkpoint covers (no writes past it, which the next start
// would undo). A difference is an exitDiffer error.
func verify(ctx context.Context, w io.Writer, dataDir string, p *pipelines.Pipeline, table string, maxDiffs int) error {
	job := p.Spec.Job.Name
	si := slices.IndexFunc(p.Tables, func(t *pipelines.Table) bool { return t.Spec.Name == table })
	if si < 0 {
		return usageErr("job %q writes no table %q", job, table)
	}
	sink := p.Spec.Sinks[si].Name
	off, err := build.NewOffline(p)
	if err != nil {
		return usageErr("verify job %q: %v", job, err)
	}
	for _, s := range p.Spec.Sources {
		if s.Kafka != nil && s.Kafka.StartOffset != "earliest" {
			return usageErr("verify job %q: source %q starts at %s: verify reads the input from the start of every partition, so it needs start_offset: earliest",
				job, s.Name, s.Kafka.StartOffset)
		}
	}
	if e, err := findRunner(dataDir, ""); err != nil {
		return err
	} else if e != nil {
		return usageErr("the runner at %s uses the data directory %s: verify checks a stopped job; stop it first (runner stop --data-dir %s)",
			e.addr, dataDir, dataDir)
	}
	if err := jobExists(dataDir, job); err != nil {
		return err
	}
	if err := tableExists(dataDir, table); err != nil {
		return err
	}
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	storage, err := state.OpenStorage(build.CheckpointDir(dataDir, job))
	if err != nil {
		return err
	}
	md, _, err := storage.Latest()
	if err != nil {
		return fmt.Errorf("verify job %q: %w", job, err)
	}
	env := build.NewEnv(build.Options{DataDir: dataDir})
	defer env.Close()

	t, err := aggmerge.Open(build.TableDir(dataDir, table), aggmerge.Schema{}, aggmerge.Options{})
	if err != nil {
		return err
	}
	defer t.Close()
	op, ok := md.Operators[sink]
	if !ok {
		return fmt.Errorf("verify job %q: checkpoint %d holds no state of sink %q", job, md.ID, sink)
	}
	pending, err := writer.Pending(t, job, sink, op)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		keys := 0
		for _, n := range pending {
			keys += n
		}
		return fmt.Errorf("table %q holds writes of job %q past its latest checkpoint %d (%d keys in buckets %v), which its next start undoes: "+
			"the job was killed or failed; run it again and stop it (SIGTERM or runner stop), then verify", table, job, md.ID, keys, slices.Sorted(maps.Keys(pending)))
	}

	final := ""
	if md.Final {
		final = ", final"
	}
	fmt.Fprintf(w, "verify job %q table %q against checkpoint %d (%s%s)\n", job, table, md.ID, md.Time.UTC().Format(time.RFC3339), final)
	m, err := newModel(p.Tables[si])
	if err != nil {
		return err
	}
	in := &inputFold{w: w, off: off, m: m, sink: si, md: uint64(md.ID)}
	if err := in.read(ctx, env, p, md); err != nil {
		return err
	}
	fmt.Fprintf(w, "input: %d records, %d filtered out, %d dropped by on_error, %d keys expected\n", in.records, in.filtered, in.dropped, len(m.rows))

	c := &comparison{m: m, ownsAll: len(p.Tables[si].Columns) == len(t.Schema().Values)}
	if c.expected, err = c.expectations(); err != nil {
		return err
	}
	tab, err := tableSide(t, m)
	if err != nil {
		return err
	}
	c.sides = append(c.sides, tab)
	if cl := p.Tables[si].Spec.Changelog; cl != nil {
		side, err := changelogSide(ctx, env, cl, m)
		if err != nil {
			return err
		}
		c.sides = append(c.sides, side)
	}
	n := c.report(w, maxDiffs)
	if p.Tables[si].Spec.Changelog == nil {
		fmt.Fprintf(w, "changelog: table %q publishes none\n", table)
	}
	n += len(in.failures)
	for i, f := range in.failures {
		if i == maxDiffs {
			fmt.Fprintf(w, "  ... and %d more input records the job fails on\n", len(in.failures)-i)
			break
		}
		fmt.Fprintf(w, "input: %s\n", f)
	}
	if n > 0 {
		return &exitError{code: exitDiffer, err: fmt.Errorf("verify job %q table %q: %d difference(s)", job, table, n)}
	}
	fmt.Fprintln(w, "verify: equal")
	return nil
}

// inputFold reads a job's input up to a checkpoint and folds it into the
// model through the job's record path.
type inputFold struct {
	w                          io.Writer
	off                        *build.Offline
	m                          *model
	sink                       int
	md                         uint64 // the checkpoint, for messages
	records, filtered, dropped int
	failures                   []string // records the job fails on, yet the checkpoint covers
	row                        writer.Row
}

func (in *inputFold) read(ctx context.Context, env *build.Env, p *pipelines.Pipeline, md state.Metadata) error {
	for i := range p.Spec.Sources {
		src := &p.Spec.Sources[i]
		cov, err := in.off.CoveredBy(md, i)
		if err != nil {
			return err
		}
		if src.Kafka == nil && src.Datagen.Topic == "" {
			in.generated(i, src, cov.Lanes)
			continue
		}
		var connSpec pipelines.Connection
		policy := pipelines.OnErrorFail
		isolation := kgo.FetchIsolationLevel(kgo.ReadCommitted())
		if src.Kafka != nil {
			connSpec, policy = src.Kafka.Connection, src.Kafka.OnError
			if src.Kafka.IsolationLevel == "read_uncommitted" {
				isolation = kgo.FetchIsolationLevel(kgo.ReadUncommitted())
			}
		} else {
			connSpec = src.Datagen.Kafka
		}
		conn, err := env.KafkaConnection(connSpec)
		if err != nil {
			return err
		}
		opts, err := conn.Options()
		if err != nil {
			return err
		}
		opts = append(opts, isolation)
		for _, topic := range slices.Sorted(maps.Keys(cov.Offsets)) {
			if err := in.topic(ctx, i, src.Name, policy, opts, conn.Brokers, topic, cov.Offsets[topic]); err != nil {
				return err
			}
		}
	}
	return nil
}

// topic folds the records of one topic of source i up to the offsets until.
func (in *inputFold) topic(ctx context.Context, i int, source string, policy pipelines.OnError, opts []kgo.Opt, brokers []string,
	topic string, until map[int32]int64) error {
	starts, _, err := topicOffsets(ctx, opts, strings.Join(brokers, ","), topic)
	if err != nil {
		return fmt.Errorf("source %q: %w", source, err)
	}
	var parts []string
	for _, part := range slices.Sorted(maps.Keys(until)) {
		parts = append(parts, fmt.Sprintf("%d:%d", part, until[part]))
		if starts[part] > 0 && until[part] > 0 {
			return fmt.Errorf("source %q topic %q partition %d starts at offset %d: records the job read are gone (retention), so its input cannot be recomputed",
				source, topic, part, starts[part])
		}
	}
	fmt.Fprintf(in.w, "input: source %q topic %q up to offsets %s (partition:next offset)\n", source, topic, strings.Join(parts, " "))
	from := map[int32]int64{}
	for part := range until {
		from[part] = 0
	}
	err = readPartitions(ctx, opts, topic, from, until, func(r *kgo.Record) error {
		in.records++
		where := fmt.Sprintf("topic %q partition %d offset %d", r.Topic, r.Partition, r.Offset)
		row, err := in.off.Decode(i, r)
		if err != nil {
			in.failed(policy, where, err)
			return nil
		}
		in.fold(lane{source: i, topic: topic, part: int64(r.Partition)}, policy, where, row)
		return nil
	})
	if err == nil {
		err = ctx.Err() // readPartitions ends quietly when ctx does
	}
	if err != nil {
		return fmt.Errorf("source %q: read topic %q: %w", source, topic, err)
	}
	return nil
}

// generated folds the records that the lanes of datagen source i made.
func (in *inputFold) generated(i int, src *pipelines.Source, lanes []build.DatagenLane) {
	var parts []string
	count := src.Datagen.Count
	slices.SortFunc(lanes, func(a, b build.DatagenLane) int { return int(a.ID - b.ID) })
	for _, l := range lanes {
		parts = append(parts, fmt.Sprintf("%d/%d:%d", l.ID, l.Of, l.Next))
		for n := l.ID; n < l.Next && (count == 0 || n < count); n += l.Of {
			in.records++
			// A datagen's policy is fail.
			in.fold(lane{source: i, part: l.ID}, pipelines.OnErrorFail, fmt.Sprintf("datagen %q record %d", src.Name, n), in.off.Generate(i, n))
		}
	}
	fmt.Fprintf(in.w, "input: source %q (datagen) up to records %s (lane/lanes:next record)\n", src.Name, strings.Join(parts, " "))
}

// fold runs one input row of lane l through the job's record path into
// the model.
func (in *inputFold) fold(l lane, policy pipelines.OnError, where string, row pipelines.Row) {
	keep, err := in.off.Transform(row)
	switch {
	case err != nil:
		in.failed(policy, where, err)
	case !keep:
		in.filtered++
	default:
		if err := in.off.Write(in.sink, row, &in.row); err != nil {
			in.failures = append(in.failures, fmt.Sprintf("%s: the table's writer fails on %s: %v", where, in.off.JSON(row), err))
		} else if err := in.m.add(l, in.row.Key, in.row.Vals); err != nil {
			in.failures = append(in.failures, fmt.Sprintf("%s: the table fails on it: %v", where, err))
		}
	}
}

// failed applies the source's on_error policy to a record that failed.
func (in *inputFold) failed(policy pipelines.OnError, where string, err error) {
	if policy == pipelines.OnErrorFail {
		in.failures = append(in.failures, fmt.Sprintf("%s: the job fails on it (on_error: fail), yet checkpoint %d covers it: %v", where, in.md, err))
		return
	}
	in.dropped++
}

// side is a table as one of the compared sources has it: key → the cells
// of the sink's columns.
type side struct {
	name  string
	rows  map[string][]string
	notes []string // differences that are not about a key's values
}

// tableSide reads the sink's columns of every row of t.
func tableSide(t *aggmerge.Table, m *model) (*side, error) {
	s := t.Schema()
	idx := make([]int, len(m.cols))
	for i, c := range m.cols {
		if idx[i] = s.ValueIndex(c.col.Name); idx[i] < 0 {
			return nil, fmt.Errorf("table %s has no column %q", t.Dir(), c.col.Name)
		}
	}
	out := &side{name: "table", rows: map[string][]string{}}
	err := t.Scan(func(r aggmerge.Row) error {
		cells := make([]string, len(idx))
		for i, j := range idx {
			var err error
			if cells[i], err = valueCell(s.Values[j], r.Values[j]); err != nil {
				return err
			}
		}
		out.rows[keyJSON(m.keyNames, r.Key)] = cells
		return nil
	})
	return out, err
}

// changelogSide replays the changelog topic (read_committed, up to its
// last stable offsets) into rows, and notes every record whose log offset
// does not follow the one before it in its partition: a duplicate.
func changelogSide(ctx context.Context, env *build.Env, cl *pipelines.Changelog, m *model) (*side, error) {
	conn, err := env.KafkaConnection(cl.Connection)
	if err != nil {
		return nil, err
	}
	opts, err := conn.Options()
	if err != nil {
		return nil, err
	}
	starts, ends, err := topicOffsets(ctx, opts, cl.Cluster(), cl.Topic)
	if err != nil {
		return nil, fmt.Errorf("changelog: %w", err)
	}
	out := &side{name: "changelog", rows: map[string][]string{}}
	last := map[int32]uint64{}
	debezium := cl.Format == pipelines.ChangelogFormat(export.DebeziumJSON)
	err = readPartitions(ctx, opts, cl.Topic, starts, ends, func(r *kgo.Record) error {
		if debezium && r.Value == nil {
			return nil // the tombstone after a delete
		}
		var offset string
		for _, h := range r.Headers {
			if h.Key == export.HeaderOffset {
				offset = string(h.Value)
			}
		}
		lo, err := strconv.ParseUint(offset, 10, 64)
		if err != nil {
			return fmt.Errorf("changelog %s/%d at %d: header %s %q: %w", r.Topic, r.Partition, r.Offset, export.HeaderOffset, offset, err)
		}
		if prev, ok := last[r.Partition]; ok && lo <= prev {
			out.notes = append(out.notes, fmt.Sprintf("partition %d offset %d, key %s: log offset %d after log offset %d: a change published twice",
				r.Partition, r.Offset, r.Key, lo, prev))
		}
		last[r.Partition] = max(last[r.Partition], lo)
		row, err := changelogRow(r.Value, debezium)
		if err != nil {
			return fmt.Errorf("changelog %s/%d at %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if row == nil {
			delete(out.rows, string(r.Key))
			return nil
		}
		cells := make([]string, len(m.cols))
		for i, c := range m.cols {
			v, err := jsonValue(c.col.Type, row[c.col.Name])
			if err == nil {
				cells[i], err = valueCell(c.col, v)
			}
			if err != nil {
				return fmt.Errorf("changelog %s/%d at %d: column %s: %w", r.Topic, r.Partition, r.Offset, c.col.Name, err)
			}
		}
		out.rows[string(r.Key)] = cells
		return nil
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: %w", cl.Topic, err)
	}
	return out, nil
}

// changelogRow returns the row image a changelog record leaves (nil: a
// delete).
func changelogRow(value []byte, debezium bool) (map[string]json.RawMessage, error) {
	if value == nil {
		return nil, nil
	}
	if !debezium {
		var row map[string]json.RawMessage
		return row, json.Unmarshal(value, &row)
	}
	var env struct {
		Op    string                     `json:"op"`
		After map[string]json.RawMessage `json:"after"`
	}
	if err := json.Unmarshal(value, &env); err != nil {
		return nil, err
	}
	if env.Op == "d" {
		return nil, nil
	}
	return env.After, nil
}

// jsonValue reads a column's value as the changelog writes it.
func jsonValue(t agg.Type, raw json.RawMessage) (agg.Value, error) {
	if raw == nil || string(raw) == "null" {
		return agg.NullValue(), nil
	}
	if t.Kind == agg.KindStringSet {
		var elems []string
		if err := json.Unmarshal(raw, &elems); err != nil {
			return agg.Value{}, err
		}
		return agg.SetValue(elems...), nil
	}
	return keyValue(t, raw)
}

// comparison holds the expected rows and the sides compared with them.
type comparison struct {
	m        *model
	ownsAll  bool // the sink writes every value column of the table
	expected map[string][]expectation
	sides    []*side
}

// expectations returns what every key's row must be. In a table that other
// jobs write too, a row without a value in the sink's columns is none.
func (c *comparison) expectations() (map[string][]expectation, error) {
	out := map[string][]expectation{}
	for k := range c.m.rows {
		e, err := c.m.expect(k)
		if err != nil {
			return nil, err
		}
		if c.ownsAll || slices.ContainsFunc(e, func(x expectation) bool { return x.cell != "null" }) {
			out[k] = e
		}
	}
	return out, nil
}

// row returns a side's row of key, nil when it has none worth counting.
func (c *comparison) row(s *side, key string) []string {
	cells := s.rows[key]
	if cells == nil || c.ownsAll || slices.ContainsFunc(cells, func(x string) bool { return x != "null" }) {
		return cells
	}
	return nil
}

// report prints each side's verdict and the differing keys (at most max),
// and returns the number of differences.
func (c *comparison) report(w io.Writer, maxDiffs int) int {
	keys := map[string]bool{}
	for k := range c.expected {
		keys[k] = true
	}
	for _, s := range c.sides {
		for k := range s.rows {
			if c.row(s, k) != nil {
				keys[k] = true
			}
		}
	}
	differing := map[string]bool{}
	total := 0
	for _, s := range c.sides {
		var missing, extra, wrong int
		for k := range keys {
			e, got := c.expected[k], c.row(s, k)
			switch {
			case e == nil && got == nil:
			case e == nil:
				extra++
			case got == nil:
				missing++
			case !holds(e, got):
				wrong++
			default:
				continue
			}
			differing[k] = true
		}
		n := missing + extra + wrong + len(s.notes)
		total += n
		if n == 0 {
			fmt.Fprintf(w, "%s: equal (%d keys)\n", s.name, len(c.expected))
			continue
		}
		fmt.Fprintf(w, "%s: DIFFERENT: %d keys with wrong values, %d missing, %d unexpected, %d other\n", s.name, wrong, missing, extra, len(s.notes))
		for i, note := range s.notes {
			if i == maxDiffs {
				fmt.Fprintf(w, "  ... and %d more\n", len(s.notes)-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", note)
		}
	}
	listed := slices.Sorted(maps.Keys(differing))
	for i, k := range listed {
		if i == maxDiffs {
			fmt.Fprintf(w, "... and %d more differing keys\n", len(listed)-i)
			break
		}
		c.printKey(w, k)
	}
	return total
}

// holds reports whether every cell meets its column's expectation.
func holds(e []expectation, cells []string) bool {
	for i := range e {
		if !e[i].holds(cells[i]) {
			return false
		}
	}
	return true
}

// printKey prints, for one key, every column where a side differs from the
// expectation: expected, then each side's value.
func (c *comparison) printKey(w io.Writer, key string) {
	fmt.Fprintf(w, "key %s:\n", key)
	e := c.expected[key]
	for i, col := range c.m.cols {
		var b strings.Builder
		differs := false
		if e == nil {
			b.WriteString("expected no row")
		} else {
			b.WriteString("expected " + e[i].String())
		}
		for _, s := range c.sides {
			got := c.row(s, key)
			switch {
			case got == nil && e != nil:
				differs = true
				fmt.Fprintf(&b, ", %s: no row", s.name)
			case got == nil:
				fmt.Fprintf(&b, ", %s: no row", s.name)
			default:
				differs = differs || e == nil || !e[i].holds(got[i])
				fmt.Fprintf(&b, ", %s %s", s.name, got[i])
			}
		}
		if differs {
			fmt.Fprintf(w, "  %s: %s\n", col.col.Name, b.String())
		}
	}
}
