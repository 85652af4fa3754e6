package pipelines

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is a job file's name (used in messages) and content.
type File struct {
	Name string
	Data []byte
}

// ReadFiles reads job files from disk.
func ReadFiles(paths ...string) ([]File, error) {
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read job file: %w", err)
		}
		files = append(files, File{Name: p, Data: b})
	}
	return files, nil
}

// Options configures Load.
type Options struct {
	// LookupEnv resolves ${VAR}; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Set holds overrides "path=value", applied to every job before it is
	// decoded: path is as in error messages (checkpoint.interval,
	// source.kafka.brokers, transforms[0].filter) and value is YAML
	// (5s, [a:9092, b:9092], {x: 1}).
	Set []string
	// Registry holds the components registered from Go that the files may
	// use besides the built-in ones (nil: none).
	Registry *Registry
}

// Load decodes and validates job files: each YAML document of each file is
// one job. It returns the jobs, or an Errors with every problem found.
func Load(files []File, opts Options) ([]*Pipeline, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	overrides, errs := parseOverrides(opts.Set)
	var out []*Pipeline
	for _, f := range files {
		ps, es := loadFile(f, overrides, opts)
		out = append(out, ps...)
		errs = append(errs, es...)
	}
	if len(errs) == 0 {
		crossCheck(out)
		for _, p := range out {
			errs = append(errs, p.where.errs...)
		}
	}
	if len(errs) > 0 {
		return nil, errs.sort()
	}
	return out, nil
}

func loadFile(f File, overrides []override, opts Options) ([]*Pipeline, Errors) {
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	lines := strings.Split(string(f.Data), "\n")
	var out []*Pipeline
	var errs Errors
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, append(errs, syntaxError(f.Name, err))
		}
		if len(doc.Content) == 0 {
			continue
		}
		d := newDecoder(f.Name, opts.LookupEnv)
		d.registry = opts.Registry
		root := doc.Content[0]
		for _, o := range overrides {
			o.apply(d, root)
		}
		spec := &Spec{}
		setDefaults(reflectValue(spec))
		d.value(root, reflectValue(spec), "", fieldInfo{})
		v := &validator{decoder: d, lines: lines, spec: spec, broken: map[string]bool{}}
		p := v.validate()
		errs = append(errs, d.errs...)
		out = append(out, p)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, &Error{File: f.Name, Line: 1, Column: 1, Msg: "the file holds no job"})
	}
	return out, errs
}

// syntaxError turns a YAML parse error ("yaml: line 3: ...") into an Error.
func syntaxError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: file, Line: 1, Column: 1, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				e.Line, e.Msg = l, tail
			}
		}
	}
	return e
}

// crossCheck checks what concerns several jobs, recording errors in the
// later job: unique names, tables shared by jobs agreeing on their key
// and buckets with disjoint columns, and a job writing into an owner
// job's scaled table agreeing with the owner.
func crossCheck(ps []*Pipeline) {
	jobs := map[string]*Pipeline{}
	type owner struct {
		p *Pipeline
		t *Table
	}
	tables := map[string][]owner{}
	for _, p := range ps {
		if q, dup := jobs[p.Spec.Job.Name]; dup {
			p.where.fail("job.name", "job name %q is also used in %s", p.Spec.Job.Name, q.File)
		}
		jobs[p.Spec.Job.Name] = p
		for _, t := range p.Tables {
			for _, o := range tables[t.Spec.Name] {
				if !slices.Equal(o.t.Spec.PrimaryKey, t.Spec.PrimaryKey) || o.t.Spec.Buckets != t.Spec.Buckets {
					p.where.fail(t.path, "table %q: primary key and buckets differ from job %q's", t.Spec.Name, o.p.Spec.Job.Name)
					continue
				}
				for _, c := range t.Columns {
					if slices.ContainsFunc(o.t.Columns, func(d TableColumn) bool { return d.Name == c.Name }) {
						p.where.fail(t.path+".columns."+c.Name, "table %q: column %q is also written by job %q", t.Spec.Name, c.Name, o.p.Spec.Job.Name)
					}
				}
			}
			tables[t.Spec.Name] = append(tables[t.Spec.Name], owner{p, t})
		}
	}
	for _, p := range ps {
		crossCheckOwner(p, jobs)
	}
}
