// Command runner runs ebbflow jobs defined in YAML: validate them, run them
// (several in one process, sharing tables), stop them with a final
// checkpoint, and inspect their checkpoints, tables and changelogs. See
// docs/RUNNER.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// Exit codes.
const (
	exitOK        = 0
	exitFailure   = 1 // a runtime failure
	exitUsage     = 2 // invalid usage or job file
	exitRestore   = 3 // restore failed, state incompatible or corrupt
	exitDiffer    = 4 // verify: the table or its changelog differ from the input's exact result
	exitInterrupt = 130
)

// exitError carries the exit code of a command's failure.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// codeOf classifies an error into an exit code.
func codeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, aggmerge.ErrNoSpace): // a runtime failure, also when a restore met it
		return exitFailure
	case errors.Is(err, runtime.ErrRestore), errors.Is(err, writer.ErrState), errors.Is(err, aggmerge.ErrSchemaMismatch),
		errors.Is(err, aggmerge.ErrCorrupt), errors.Is(err, state.ErrCorrupt):
		return exitRestore
	}
	return exitFailure
}

func main() { os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr)) }

// execute runs the command line args and returns the exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err != nil {
		fmt.Fprintln(stderr, "runner:", err)
	}
	return codeOf(err)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "runner",
		Short:         "Run ebbflow jobs defined in YAML",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: exitUsage, err: err} })
	root.AddCommand(newRunCmd(), newValidateCmd(), newCheckpointsCmd(), newTableCmd(), newChangelogCmd(),
		newStopCmd(), newVerifyCmd(), newVersionCmd(), newTopologyCmd())
	root.AddCommand(newSnapshotCmd())
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(root.FlagErrorFunc())
		if c.Args == nil {
			c.Args = noArgs
		}
	}
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}
