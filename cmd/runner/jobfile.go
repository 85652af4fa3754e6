package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
)

// defaultDataDir is the data directory of the commands given neither a job
// file nor --data-dir (the default data_dir of a job file).
const defaultDataDir = "./data"

// dataDirFlags are the flags of the commands that work on a runner's data
// directory: --data-dir, or the job files (loaded as run loads them, --set
// included) whose data_dir it is; the files also give the defaults of
// --job, --table and --topic.
type dataDirFlags struct {
	dataDir     string
	files, sets []string
	jobs        []*pipelines.Pipeline // of files, after resolve
}

// add adds the flags to c; fileShort is the shorthand of --file ("" for
// none: changelog tail's -f is --follow).
func (d *dataDirFlags) add(c *cobra.Command, fileShort string) {
	fl := c.Flags()
	fl.StringVar(&d.dataDir, "data-dir", "", "the runner's data directory (default: the job file's data_dir, else "+defaultDataDir+")")
	fl.StringArrayVarP(&d.files, "file", fileShort, nil, "the job file the runner runs (repeatable), for its data_dir and defaults")
	fl.StringArrayVar(&d.sets, "set", nil, "override path=value in the job files, as given to run (repeatable)")
}

// resolve loads the job files and settles the data directory: --data-dir
// when given (it wins over data_dir, as with run), else the data_dir the
// files agree on, else ./data.
func (d *dataDirFlags) resolve() error {
	if len(d.files) == 0 {
		if len(d.sets) > 0 {
			return usageErr("--set applies to job files: give them with --file")
		}
		if d.dataDir == "" {
			d.dataDir = defaultDataDir
		}
		return nil
	}
	files, err := pipelines.ReadFiles(d.files...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if d.jobs, err = pipelines.Load(files, pipelines.Options{Set: d.sets}); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	d.dataDir, err = dataDir(d.jobs, d.dataDir)
	return err
}

// jobName returns the --job given, else the one job of the files.
func (d *dataDirFlags) jobName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	var names []string
	for _, p := range d.jobs {
		names = append(names, p.Spec.Job.Name)
	}
	return only("--job", "jobs", names)
}

// tableName returns the --table given, else the one table the jobs write.
func (d *dataDirFlags) tableName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	var names []string
	for _, t := range d.tables() {
		names = append(names, t.Name)
	}
	return only("--table", "tables", names)
}

// topicName returns the --topic given, else the one changelog topic of the
// jobs' tables.
func (d *dataDirFlags) topicName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	var names []string
	for _, t := range d.tables() {
		if t.Changelog != nil {
			names = append(names, t.Changelog.Topic)
		}
	}
	return only("--topic", "changelog topics", names)
}

func (d *dataDirFlags) tables() []*pipelines.TableSink {
	var ts []*pipelines.TableSink
	for _, p := range d.jobs {
		for _, s := range p.Spec.Sinks {
			if s.Table != nil {
				ts = append(ts, s.Table)
			}
		}
	}
	return ts
}

// only returns the one distinct name, or says why a flag is needed.
func only(flag, what string, names []string) (string, error) {
	slices.Sort(names)
	names = slices.Compact(names)
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", usageErr("give %s (or the job file, with --file, when it has one)", flag)
	}
	return "", usageErr("the job files have %s %s: give %s", what, strings.Join(names, ", "), flag)
}

// embeddedPort is --embedded-kafka-port, else the embedded_kafka.port the
// jobs that give one agree on (one runner has one embedded broker), else 0:
// any free port.
func embeddedPort(ps []*pipelines.Pipeline, flag int) (int, error) {
	if flag < 0 || flag > 65535 {
		return 0, usageErr("--embedded-kafka-port %d: want a port, 0 to 65535", flag)
	}
	if flag != 0 {
		return flag, nil
	}
	port, from := 0, ""
	for _, p := range ps {
		switch q := p.Spec.EmbeddedKafka.Port; {
		case q == 0 || q == port:
		case port == 0:
			port, from = q, p.Spec.Job.Name
		default:
			return 0, usageErr("jobs %q and %q name different embedded_kafka.port (%d, %d): one runner has one embedded broker; pass --embedded-kafka-port",
				from, p.Spec.Job.Name, port, q)
		}
	}
	return port, nil
}

// tableExists refuses a table the data directory does not have, naming
// the ones it has.
func tableExists(dataDir, table string) error {
	return exists(dataDir, "table", table, filepath.Dir(build.TableDir(dataDir, table)),
		func(name string) string { return build.TableDir(dataDir, name) })
}

// jobExists refuses a job that has no checkpoints in the data directory,
// naming the jobs that have.
func jobExists(dataDir, job string) error {
	return exists(dataDir, "job", job, filepath.Join(dataDir, "jobs"),
		func(name string) string { return build.CheckpointDir(dataDir, name) })
}

// exists checks that path(name) exists; else the usage error lists the
// entries of parent whose path exists.
func exists(dataDir, kind, name, parent string, path func(string) string) error {
	_, err := os.Stat(path(name))
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, err := os.Stat(dataDir); errors.Is(err, fs.ErrNotExist) {
		return usageErr("no %s %q: the data directory %s does not exist (give the job file with -f, or --data-dir)", kind, name, dataDir)
	}
	entries, err := os.ReadDir(parent)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("list the %ss in %s: %w", kind, dataDir, err)
	}
	var have []string
	for _, e := range entries {
		if _, err := os.Stat(path(e.Name())); err == nil && e.IsDir() {
			have = append(have, e.Name())
		}
	}
	return noSuch(kind, name, "in "+dataDir, have)
}

// noSuch is the usage error for a name that is not where it was looked
// for, listing the names that are.
func noSuch(kind, name, where string, have []string) error {
	if len(have) == 0 {
		return usageErr("no %s %q %s: there are no %ss", kind, name, where, kind)
	}
	return usageErr("no %s %q %s; %ss: %s", kind, name, where, kind, strings.Join(have, ", "))
}
