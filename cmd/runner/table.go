package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

type tableFlags struct {
	dataDirFlags
	table, key, output, address string
	// allowLostWrites reads a table whose log lost synced writes, warning.
	allowLostWrites bool
	// all reads the whole table of a scaled job, every instance's buckets,
	// from its changelog.
	all bool
}

func newTableCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "table", Short: "Read a table (from a stopped runner's data directory, or through a running one), or release a removed job's hold on it"}
	var f tableFlags
	scan := &cobra.Command{Use: "scan", Short: "Print every row (or the row of --key); --all: every instance's rows of a scaled job",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.all && f.key != "" {
				return usageErr("give --all or --key: --all reads every row of the whole table")
			}
			return tableRead(cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		}}
	scan.Flags().BoolVar(&f.all, "all", false, "a scaled job's table (docs/SCALING.md): read every instance's buckets from the changelog, at each instance's newest committed version (through the runner, else from the job files' Kafka); other tables are whole anyway")
	get := &cobra.Command{Use: "get", Short: "Print the row of --key",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.key == "" {
				return usageErr("table get needs --key")
			}
			return tableRead(cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		}}
	for _, c := range []*cobra.Command{scan, get} {
		f.add(c, "f")
		fl := c.Flags()
		fl.StringVar(&f.table, "table", "", "table name (default: the table of the job file, when it has one)")
		fl.StringVar(&f.key, "key", "", `primary key as JSON, e.g. {"region":"eu"}`)
		fl.StringVarP(&f.output, "output", "o", "table", "table, json (one object per line) or csv")
		fl.StringVar(&f.address, "address", "", "read through the runner at this HTTP address, host:port or https://host:port (default: the runner using --data-dir, if any)")
		fl.BoolVar(&f.allowLostWrites, "allow-lost-writes", false, "read a table whose log lost synced writes (refused by default), with a warning")
		c.Args = noArgs
		c.PreRunE = func(*cobra.Command, []string) error {
			if err := f.resolve(); err != nil {
				return err
			}
			var err error
			if f.table, err = f.tableName(f.table); err != nil {
				return err
			}
			return checkName("table", f.table)
		}
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newForgetCmd())
	return cmd
}

// newForgetCmd releases what a job removed from the files still holds in a
// table: its writers' registrations (their columns) and their log holds.
func newForgetCmd() *cobra.Command {
	var d dataDirFlags
	var table, job string
	c := &cobra.Command{Use: "forget", Short: "Release a removed job's registration and log hold in a table (runner stopped)",
		Args: noArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if err := d.resolve(); err != nil {
				return err
			}
			var err error
			if table, err = d.tableName(table); err != nil {
				return err
			}
			if job == "" {
				return usageErr("give --job: the job whose writers to release")
			}
			return errors.Join(checkName("table", table), checkName("job", job))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, unlock, err := openTableLocked(d.dataDir, table, aggmerge.Options{})
			if err != nil {
				return err
			}
			defer unlock()
			defer t.Close()
			n, err := forgetJob(t, job)
			if err != nil {
				return err
			}
			if n == 0 {
				return usageErr("table %q has no writer of job %q", table, job)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %q released from table %q (%d writer registrations and their log hold)\n", job, table, n)
			return nil
		}}
	d.add(c, "f")
	fl := c.Flags()
	fl.StringVar(&table, "table", "", "table name (default: the table of the job file, when it has one)")
	fl.StringVar(&job, "job", "", "the job whose writers to release")
	return c
}

// openTableLocked opens a table of a data directory no runner uses: it
// holds the directory's lock until unlock, so that no runner starts
// meanwhile, and a runner that holds it is named (pebble's own lock would
// only say "resource temporarily unavailable").
func openTableLocked(dataDir, table string, o aggmerge.Options) (*aggmerge.Table, func(), error) {
	if err := tableExists(dataDir, table); err != nil {
		return nil, nil, err
	}
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, nil, err
	}
	t, err := aggmerge.Open(build.TableDir(dataDir, table), aggmerge.Schema{}, o)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return t, unlock, nil
}

// forgetJob unregisters every writer of job and releases its log hold.
func forgetJob(t *aggmerge.Table, job string) (int, error) {
	n := 0
	for _, r := range t.Writers() {
		if r.Job != job {
			continue
		}
		if err := errors.Join(t.Unregister(r.Writer), t.ReleaseHold(aggmerge.HolderOf(r.Writer))); err != nil {
			return n, fmt.Errorf("forget writer %q: %w", r.Writer, err)
		}
		n++
	}
	return n, nil
}

// tableRead prints the rows: through the HTTP API of the runner that uses
// the data directory (pebble lets one process open a table), else from the
// table's files. A table whose log lost synced writes is refused
// (aggmerge.ErrCorrupt), or with --allow-lost-writes printed after a
// warning on stderr.
func tableRead(w, stderr io.Writer, f *tableFlags) error {
	out, err := newRowWriter(w, f.output)
	if err != nil {
		return err
	}
	e, err := findRunner(f.dataDir, f.address)
	if err != nil {
		return err
	}
	if e != nil {
		return remoteRows(e, stderr, f, out)
	}
	if f.all {
		if ok, err := offlineAll(stderr, f, out); ok {
			return err
		}
	}
	t, unlock, err := openTableLocked(f.dataDir, f.table, aggmerge.Options{AcceptLogLoss: f.allowLostWrites})
	if err != nil {
		return err
	}
	defer unlock()
	defer t.Close()
	sc, err := localScale(f.dataDir, t)
	if err != nil {
		return err
	}
	if sc != nil && f.all {
		return usageErr("table %q holds only a part of the scaled job %q (instance %d), and no runner runs on %s: "+
			"give the job file (-f, with the --set of run) to read the whole table from its changelog (or owner log)", f.table, sc.Job, sc.Instance, f.dataDir)
	}
	if sc != nil {
		fmt.Fprintln(stderr, sc.note(f.table))
	}
	if err := t.LogLoss(); err != nil {
		fmt.Fprintf(stderr, "runner: WARNING: table %q is damaged, these rows miss writes that were synced: %v\n", f.table, err)
	}
	out.header(columns(t.Schema()))
	if err := readRows(t, f.key, func(cells []string) error { return out.row(cells) }); err != nil {
		return err
	}
	return out.flush()
}

// readRows calls fn with the cells of every row, or of the row of key.
func readRows(t *aggmerge.Table, key string, fn func([]string) error) error {
	s := t.Schema()
	emit := func(r aggmerge.Row) error {
		cells, err := rowCells(s, r)
		if err != nil {
			return err
		}
		return fn(cells)
	}
	if key == "" {
		return t.Scan(emit)
	}
	k, err := parseKey(s, key)
	if err != nil {
		return usageErr("%v", err)
	}
	r, ok, err := t.Get(k)
	if err != nil || !ok {
		return err
	}
	return emit(r)
}

// remoteRows reads a table through a running runner's API: with --all,
// a scaled job's whole table, which the runner reads from the changelog.
func remoteRows(e *endpoint, stderr io.Writer, f *tableFlags, out *rowWriter) error {
	table := f.table
	var tables []tableInfo
	if err := e.getJSON("/api/v1/tables", &tables); err != nil {
		return err
	}
	var cols, names []string
	var part *tableScale
	for _, t := range tables {
		names = append(names, t.Name)
		if t.Name == table {
			cols, part = columns(aggmerge.Schema{Key: t.Key, Values: t.Columns}), t.Scale
		}
	}
	if cols == nil {
		return noSuch("table", table, "in the runner at "+e.addr, names)
	}
	path := "/api/v1/tables/" + url.PathEscape(table) + "/rows"
	switch {
	case f.key != "":
		path += "?key=" + url.QueryEscape(f.key)
	case f.all && part != nil:
		path += "?all=true"
	}
	resp, err := e.do(http.MethodGet, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return e.refused(fmt.Sprintf("read table %q", table), resp)
	}
	switch {
	case f.all && part != nil && resp.Header.Get(sourceHeader) == ownerLogSource:
		fmt.Fprintln(stderr, ownerLogNote(table))
	case f.all && part != nil:
		fmt.Fprintln(stderr, sharedNote(table, strings.Split(resp.Header.Get(versionsHeader), ",")))
	case part != nil:
		fmt.Fprintln(stderr, part.note(table))
	}
	out.header(cols)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("read table %q from %s: %w", table, e.addr, err)
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = string(m[c])
		}
		if err := out.row(cells); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return out.flush()
}

// rowWriter prints rows whose cells are JSON values.
type rowWriter struct {
	format string
	cols   []string
	tw     *tabwriter.Writer
	csv    *csv.Writer
	jl     *jsonLines
}

func newRowWriter(w io.Writer, format string) (*rowWriter, error) {
	rw := &rowWriter{format: format}
	switch format {
	case "table":
		rw.tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	case "csv":
		rw.csv = csv.NewWriter(w)
	case "json":
		rw.jl = &jsonLines{w: w}
	default:
		return nil, usageErr("output %q: want table, json or csv", format)
	}
	return rw, nil
}

func (rw *rowWriter) header(cols []string) {
	rw.cols = cols
	switch {
	case rw.tw != nil:
		fmt.Fprintln(rw.tw, strings.Join(cols, "\t"))
	case rw.csv != nil:
		_ = rw.csv.Write(cols)
	default:
		rw.jl.cols = cols
	}
}

func (rw *rowWriter) row(cells []string) error {
	switch {
	case rw.tw != nil:
		plain := make([]string, len(cells))
		for i, c := range cells {
			plain[i] = unquote(c)
		}
		_, err := fmt.Fprintln(rw.tw, strings.Join(plain, "\t"))
		return err
	case rw.csv != nil:
		plain := make([]string, len(cells))
		for i, c := range cells {
			plain[i] = unquote(c)
		}
		return rw.csv.Write(plain)
	}
	return rw.jl.row(cells)
}

func (rw *rowWriter) flush() error {
	switch {
	case rw.tw != nil:
		return rw.tw.Flush()
	case rw.csv != nil:
		rw.csv.Flush()
		return rw.csv.Error()
	}
	return nil
}

// unquote shows a JSON string cell as its text.
func unquote(cell string) string {
	var s string
	if strings.HasPrefix(cell, `"`) && json.Unmarshal([]byte(cell), &s) == nil {
		return s
	}
	return cell
}

// jsonLines writes rows as JSON objects, one per line, columns in table
// order.
type jsonLines struct {
	w       io.Writer
	cols    []string
	started bool
	buf     []byte
}

func (j *jsonLines) row(cells []string) error {
	if len(cells) != len(j.cols) {
		return errors.New("row and columns disagree")
	}
	j.started = true
	b := append(j.buf[:0], '{')
	for i, c := range j.cols {
		if i > 0 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(c)
		b = append(b, name...)
		b = append(b, ':')
		b = append(b, cells[i]...)
	}
	b = append(b, '}', '\n')
	j.buf = b
	_, err := j.w.Write(b)
	return err
}
