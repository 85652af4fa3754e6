// Command customsource runs a job file with components of its own: the
// "words" source (words.go) and the "suffix" step (suffix.go), registered
// with pipelines under new YAML keys, each with its own spec, checks and
// runtime part. The job is loaded,
// validated and built by pipelines and pipelines/build exactly as the runner
// does with the built-in components, then run to its end.
//
//	go run ./examples/customsource -f examples/customsource/job.yaml -data-dir /tmp/words
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

func main() {
	file := flag.String("f", "examples/customsource/job.yaml", "the job file")
	dataDir := flag.String("data-dir", "./data/customsource", "the data directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := run(ctx, *file, *dataDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "customsource:", err)
		os.Exit(1)
	}
	for _, r := range rows {
		fmt.Println(r)
	}
}

// load reads job files, knowing the built-in components, words and suffix.
func load(paths ...string) ([]*pipelines.Pipeline, error) {
	reg := &pipelines.Registry{}
	if err := errors.Join(pipelines.RegisterSource(reg, "words", Words), pipelines.RegisterTransform(reg, "suffix", Suffix)); err != nil {
		return nil, err
	}
	files, err := pipelines.ReadFiles(paths...)
	if err != nil {
		return nil, err
	}
	return pipelines.Load(files, pipelines.Options{Registry: reg})
}

// run runs the job of file to its end (or until ctx is done) in dataDir,
// restoring its latest checkpoint there, and returns its table's rows.
func run(ctx context.Context, file, dataDir string) (rows []string, err error) {
	ps, err := load(file)
	if err != nil {
		return nil, err
	}
	env := build.NewEnv(build.Options{DataDir: dataDir})
	defer func() {
		if cerr := env.Close(); err == nil {
			err = cerr
		}
	}()
	if err := env.OpenTables(ps); err != nil {
		return nil, err
	}
	job, err := env.Build(ps[0], runtime.RestoreLatest)
	if err != nil {
		return nil, err
	}
	if err := job.Run(ctx); err != nil {
		return nil, err
	}
	name := ps[0].Tables[0].Spec.Name
	t, _ := env.Table(name)
	err = t.Scan(func(r aggmerge.Row) error {
		var vals []string
		for _, v := range append(r.Key, r.Values...) {
			vals = append(vals, v.String())
		}
		rows = append(rows, strings.Join(vals, " "))
		return nil
	})
	return rows, err
}
