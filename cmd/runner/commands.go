package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/state"
)

func newValidateCmd() *cobra.Command {
	var files, sets []string
	var output string
	cmd := &cobra.Command{
		Use:   "validate -f job.yaml [-f more.yaml]",
		Short: "Check job files; every problem is reported as file:line:col: path: message",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErr("output %q: want text or json", output)
			}
			fs, err := pipelines.ReadFiles(files...)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			ps, err := pipelines.Load(fs, pipelines.Options{Set: sets})
			var errs pipelines.Errors
			if err != nil && !errors.As(err, &errs) {
				return &exitError{code: exitUsage, err: err}
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				if errs == nil {
					errs = pipelines.Errors{}
				}
				out := validateOutput{Problems: errs, Changelogs: []validateChangelog{}}
				for _, p := range ps {
					for _, c := range p.Changelogs() {
						out.Changelogs = append(out.Changelogs, validateChangelog{File: p.File, Job: p.Spec.Job.Name, ChangelogTarget: c})
					}
				}
				b, _ := json.MarshalIndent(out, "", "  ")
				fmt.Fprintln(w, string(b))
			} else if err != nil {
				fmt.Fprintln(w, err)
			} else {
				for _, p := range ps {
					fmt.Fprintf(w, "%s: job %q is valid\n", p.File, p.Spec.Job.Name)
					for _, c := range p.Changelogs() {
						fmt.Fprintf(w, "  changelog of table %q: topic %q on %s\n", c.Table, c.Topic, c.Cluster)
					}
				}
			}
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("%d problem(s) found", len(errs))}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "job file (repeatable)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override path=value (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json ({problems: [{file,line,column,path,message}], changelogs: [{file,job,table,topic,cluster}]})")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// validateOutput is what validate -o json prints: every problem, and where
// each changelog of the valid jobs goes.
type validateOutput struct {
	Problems   pipelines.Errors    `json:"problems"`
	Changelogs []validateChangelog `json:"changelogs"`
}

type validateChangelog struct {
	File string `json:"file"`
	Job  string `json:"job"`
	pipelines.ChangelogTarget
}

func newCheckpointsCmd() *cobra.Command {
	var d dataDirFlags
	var job string
	cmd := &cobra.Command{Use: "checkpoints", Short: "List, inspect and prune a job's checkpoints"}
	list := &cobra.Command{Use: "list", Short: "List the checkpoints, oldest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cps, err := listCheckpoints(d.dataDir, job)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCOMPLETED\tTIME\tFINAL\tERROR")
			for _, c := range cps {
				t := ""
				if !c.Time.IsZero() {
					t = c.Time.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%d\t%v\t%s\t%v\t%s\n", c.ID, c.Completed, t, c.Final, c.Error)
			}
			return tw.Flush()
		}}
	var id uint64
	inspect := &cobra.Command{Use: "inspect ID|latest", Short: "Print a checkpoint's metadata (verified) as JSON",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if args[0] == "latest" {
				return nil
			}
			var err error
			if id, err = strconv.ParseUint(args[0], 10, 64); err != nil {
				return usageErr("checkpoint %q: want an id or latest", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := state.OpenStorage(build.CheckpointDir(d.dataDir, job))
			if err != nil {
				return err
			}
			var md state.Metadata
			if args[0] == "latest" {
				md, _, err = s.Latest()
			} else {
				md, err = s.Load(barrier.CheckpointID(id))
			}
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(md, "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		}}
	var keep int
	prune := &cobra.Command{Use: "prune --keep N", Short: "Keep the N newest completed checkpoints; remove older and incomplete ones (runner stopped)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep < 1 {
				return usageErr("--keep %d: keep at least 1", keep)
			}
			unlock, err := lockDataDir(d.dataDir)
			if err != nil {
				return err
			}
			defer unlock()
			s, err := state.OpenStorage(build.CheckpointDir(d.dataDir, job))
			if err != nil {
				return err
			}
			return s.Retain(keep)
		}}
	prune.Flags().IntVar(&keep, "keep", 3, "completed checkpoints to keep")
	for _, c := range []*cobra.Command{list, inspect, prune} {
		d.add(c, "f")
		c.Flags().StringVar(&job, "job", "", "job name (default: the job of the job file, when it has one)")
		if c.Args == nil {
			c.Args = noArgs
		}
		c.PreRunE = func(*cobra.Command, []string) error {
			if err := d.resolve(); err != nil {
				return err
			}
			var err error
			if job, err = d.jobName(job); err != nil {
				return err
			}
			if err := checkName("job", job); err != nil {
				return err
			}
			return jobExists(d.dataDir, job)
		}
		cmd.AddCommand(c)
	}
	return cmd
}

// checkName refuses a job or table name from the command line that a job
// file could not give (pipelines.CheckName): such a name forms a path in the
// data directory, and must not lead out of it.
func checkName(flag, name string) error {
	if err := pipelines.CheckName(name); err != nil {
		return usageErr("--%s: %v", flag, err)
	}
	return nil
}

func newChangelogCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "changelog", Short: "Read a table's changelog topic"}
	var brokers []string
	var topic string
	var d dataDirFlags
	var o tailOptions
	tail := &cobra.Command{Use: "tail --topic T [-n N | --from-start] [-f]",
		Short: "Print the latest changelog records (read_committed), one JSON object per line; -f: then follow",
		PreRunE: func(*cobra.Command, []string) error {
			if err := d.resolve(); err != nil {
				return err
			}
			var err error
			topic, err = d.topicName(topic)
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.fromStart && cmd.Flags().Changed("num") {
				return usageErr("--from-start prints every record: give it or -n, not both")
			}
			if o.n < 0 {
				return usageErr("-n %d: want 0 or more", o.n)
			}
			if len(brokers) == 0 {
				found, closeBroker, err := embeddedBrokers(d.dataDir)
				if err != nil {
					return err
				}
				defer closeBroker()
				brokers = found
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return tailChangelog(ctx, cmd.OutOrStdout(), brokers, topic, o)
		}}
	fl := tail.Flags()
	fl.StringSliceVar(&brokers, "brokers", nil, "seed brokers (default: the embedded broker of the runner using --data-dir)")
	fl.StringVar(&topic, "topic", "", "changelog topic (default: the one of the job file's table, when it has one)")
	fl.IntVarP(&o.n, "num", "n", 10, "print the latest N records of the topic (all partitions, by timestamp)")
	fl.BoolVar(&o.fromStart, "from-start", false, "print every record from the start instead of the latest N")
	fl.BoolVarP(&o.follow, "follow", "f", false, "then print new records as they come, until interrupted")
	d.add(tail, "") // -f is --follow
	tail.Args = noArgs
	cmd.AddCommand(tail)
	return cmd
}

// embeddedBrokers finds the embedded broker of the runner using dataDir:
// asked of the runner while it runs; else, once it stopped, started here on
// the topics it saved in the data directory (holding the directory's lock,
// so that no runner starts meanwhile), and closed by the returned func.
func embeddedBrokers(dataDir string) ([]string, func(), error) {
	e, err := findRunner(dataDir, "")
	if err != nil {
		return nil, nil, err
	}
	if e != nil {
		var k struct {
			Embedded []string `json:"embedded_brokers"`
		}
		if err := e.getJSON("/api/v1/kafka", &k); err != nil {
			return nil, nil, err
		}
		if len(k.Embedded) == 0 {
			return nil, nil, usageErr("the runner at %s has no embedded broker: pass --brokers", e.addr)
		}
		return k.Embedded, func() {}, nil
	}
	dir := build.KafkaDir(dataDir)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, usageErr("no --brokers, no running runner on --data-dir %s, and no embedded broker's topics in %s", dataDir, dir)
	}
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, nil, err
	}
	b, err := embedded.Start(embedded.Options{DataDir: dir})
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("start the embedded broker on %s: %w", dir, err)
	}
	return b.Addrs(), func() { b.Close(); unlock() }, nil
}

func newStopCmd() *cobra.Command {
	var address string
	var d dataDirFlags
	var timeout time.Duration
	cmd := &cobra.Command{Use: "stop", Short: "Ask a running runner to take a final checkpoint and exit; waits until it has",
		PreRunE: func(*cobra.Command, []string) error { return d.resolve() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := findRunner(d.dataDir, address)
			if err != nil {
				return err
			}
			if e == nil {
				return usageErr("no --address, and no running runner on the data directory %s", d.dataDir)
			}
			resp, err := e.do(http.MethodPost, "/api/v1/stop")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				return e.refused("stop", resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "runner at %s stopping\n", e.addr)
			for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if !e.live() {
					fmt.Fprintln(cmd.OutOrStdout(), "stopped")
					return nil
				}
			}
			return fmt.Errorf("runner at %s still running after %s", e.addr, timeout)
		}}
	cmd.Flags().StringVar(&address, "address", "", "the runner's HTTP address, host:port or https://host:port (default: the runner using --data-dir)")
	d.add(cmd, "f") // the data directory's token file authorizes the stop
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the runner to exit")
	return cmd
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "runner %s (revision %s, %s)\n", version, revision(), goVersion())
		}}
}
