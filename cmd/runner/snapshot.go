package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// snapshotOut is a snapshot as the API and `runner snapshot -o json` give
// it.
type snapshotOut struct {
	// Consistent is true when the versions are mutually consistent; Mode
	// says it in words: "consistent", or "weak" (the newest version of
	// each table, not checked).
	Consistent bool               `json:"consistent"`
	Mode       string             `json:"mode"`
	Tables     []snapshotTableOut `json:"tables"`
}

type snapshotTableOut struct {
	Table   string         `json:"table"`
	Topic   string         `json:"topic"`
	Version export.Version `json:"version"`
	// Source is where the rows were read: "table" (the hosting runner's
	// table and its log) or "changelog" (the topic up to the version's end
	// offsets).
	Source string      `json:"source"`
	Rows   []kafka.Row `json:"rows"` // sorted by primary key (its JSON)
}

func snapshotOutOf(s *export.Snapshot) (snapshotOut, error) {
	out := snapshotOut{Consistent: s.Consistent, Mode: "consistent", Tables: []snapshotTableOut{}}
	if !s.Consistent {
		out.Mode = "weak"
	}
	for _, t := range s.Tables {
		to := snapshotTableOut{Table: t.Version.Table, Topic: t.Topic, Version: t.Version, Source: "changelog"}
		if t.Local {
			to.Source = "table"
		}
		var err error
		if to.Rows, err = t.Rows.Sorted(); err != nil {
			return snapshotOut{}, fmt.Errorf("table %s at version %d: %w", t.Version.Table, t.Version.Version, err)
		}
		out.Tables = append(out.Tables, to)
	}
	return out, nil
}

// apiSnapshot writes the tables of ?tables=a,b,c at the newest mutually
// consistent set of versions (or, with ?weak=true, the newest of each):
// 400 for a name it cannot read, 409 when no consistent set exists (with
// the reasons), 410 when a version is past the changelog's retention.
func (r *runner) apiSnapshot(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	names := splitNames(q.Get("tables"))
	if len(names) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give ?tables=a,b,c"})
		return
	}
	weak := false
	if s := q.Get("weak"); s != "" {
		var err error
		if weak, err = strconv.ParseBool(s); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("weak=%q: want true or false", s)})
			return
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), time.Minute)
	defer cancel()
	s, err := r.env.Snapshot(ctx, names, weak)
	var ie *export.InconsistentError
	switch {
	case err == nil:
		out, err := snapshotOutOf(s)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	case errors.As(err, &ie):
		writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "reasons": ie.Reasons})
	case errors.Is(err, build.ErrSnapshotName):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case errors.Is(err, export.ErrPastRetention):
		writeJSON(w, http.StatusGone, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
}

func splitNames(s string) []string {
	var out []string
	for n := range strings.SplitSeq(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func newSnapshotCmd() *cobra.Command {
	var d dataDirFlags
	var tables, brokers []string
	var weak bool
	var output, address string
	var timeout time.Duration
	cmd := &cobra.Command{Use: "snapshot --tables a,b,c",
		Short: "Print tables at the newest mutually consistent set of their versions (or, --weak, the newest of each)",
		PreRunE: func(*cobra.Command, []string) error {
			if len(tables) == 0 {
				return usageErr("give --tables a,b,c")
			}
			if output != "table" && output != "json" {
				return usageErr("output %q: want table or json", output)
			}
			return d.resolve()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var s snapshotOut
			var err error
			if len(brokers) == 0 && address == "" {
				// Through the runner using the data directory, if one runs.
				var e *endpoint
				if e, err = findRunner(d.dataDir, ""); err != nil {
					return err
				}
				if e != nil {
					address = e.addr
				}
			}
			if address != "" && len(brokers) == 0 {
				s, err = remoteSnapshot(&d, address, tables, weak)
			} else {
				s, err = kafkaSnapshot(ctx, &d, brokers, tables, weak)
			}
			if err != nil {
				return err
			}
			return printSnapshot(cmd.OutOrStdout(), s, output)
		}}
	fl := cmd.Flags()
	fl.StringSliceVar(&tables, "tables", nil, "the tables, comma-separated: names of tables of the runner (or of the job files, or of the data directory's versions), else changelog topics")
	fl.BoolVar(&weak, "weak", false, "the newest version of each table, NOT checked for consistency")
	fl.StringVarP(&output, "output", "o", "table", "table or json")
	fl.StringSliceVar(&brokers, "brokers", nil, "read from these Kafka brokers (default: through the runner using --data-dir, else its embedded broker)")
	fl.StringVar(&address, "address", "", "read through the runner at this HTTP address, host:port or https://host:port (default: the runner using --data-dir, if any)")
	fl.DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	d.add(cmd, "f")
	return cmd
}

// remoteSnapshot asks the runner at address.
func remoteSnapshot(d *dataDirFlags, address string, tables []string, weak bool) (snapshotOut, error) {
	var s snapshotOut
	e, err := findRunner(d.dataDir, address)
	if err != nil {
		return s, err
	}
	path := "/api/v1/snapshot?tables=" + url.QueryEscape(strings.Join(tables, ",")) + "&weak=" + strconv.FormatBool(weak)
	resp, err := e.do(http.MethodGet, path)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			return s, fmt.Errorf("snapshot from %s: %w", e.addr, err)
		}
		return s, nil
	case http.StatusBadRequest:
		return s, &exitError{code: exitUsage, err: e.refused("snapshot", resp)}
	}
	return s, e.refused("snapshot", resp)
}

// kafkaSnapshot reads the tables from Kafka: from brokers, or else from the
// embedded broker of the runner using the data directory. A name of a
// table of the job files, or of the data directory's versions, is read
// from its changelog topic (and format); another name is a changelog topic.
func kafkaSnapshot(ctx context.Context, d *dataDirFlags, brokers, names []string, weak bool) (snapshotOut, error) {
	if len(brokers) == 0 {
		found, closeBroker, err := embeddedBrokers(d.dataDir)
		if err != nil {
			return snapshotOut{}, err
		}
		defer closeBroker()
		brokers = found
	}
	cfg := export.SnapshotConfig{Kafka: kafka.Connection{Brokers: brokers}, Weak: weak, Formats: map[string]export.Format{}}
	for _, n := range names {
		topic, format, err := changelogOf(d, n)
		if err != nil {
			return snapshotOut{}, err
		}
		cfg.Topics = append(cfg.Topics, topic)
		cfg.Formats[topic] = format
	}
	s, err := export.ReadSnapshot(ctx, cfg)
	if err != nil {
		return snapshotOut{}, err
	}
	return snapshotOutOf(s)
}

// changelogOf returns the changelog topic and format of table name: from
// the job files, else from the data directory's versions of it, else name
// itself is the topic.
func changelogOf(d *dataDirFlags, name string) (string, export.Format, error) {
	for _, t := range d.tables() {
		if t.Name == name && t.Changelog != nil {
			return t.Changelog.Topic, export.Format(t.Changelog.Format), nil
		}
	}
	vs, err := export.ReadVersionsFile(build.VersionsFile(d.dataDir, name))
	if err != nil {
		return "", "", err
	}
	if len(vs) > 0 {
		return vs[len(vs)-1].Topic, "", nil
	}
	return name, "", nil
}

// printSnapshot prints s as JSON, or per table its version and rows.
func printSnapshot(w io.Writer, s snapshotOut, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	if s.Consistent {
		fmt.Fprintln(w, "snapshot: consistent (each version derived from exactly the versions shown of the tables it reads)")
	} else {
		fmt.Fprintln(w, "snapshot: WEAK (the newest version of each table, NOT checked for consistency)")
	}
	for _, t := range s.Tables {
		ups := make([]string, 0, len(t.Version.Upstream))
		for _, u := range t.Version.Upstream {
			ups = append(ups, fmt.Sprintf("%s@%d", u.Topic, u.Version))
		}
		fmt.Fprintf(w, "\ntable %s  topic %s  version %d  committed %s  from the %s", t.Table, t.Topic, t.Version.Version,
			t.Version.CommitTime.Format(time.RFC3339Nano), t.Source)
		if len(ups) > 0 {
			fmt.Fprintf(w, "  reads %s", strings.Join(ups, ", "))
		}
		fmt.Fprintf(w, "  %d rows\n", len(t.Rows))
		out, err := newRowWriter(w, "table")
		if err != nil {
			return err
		}
		for i, r := range t.Rows {
			fs := r.Fields()
			if i == 0 {
				cols := make([]string, len(fs))
				for j, f := range fs {
					cols[j] = f.Name
				}
				out.header(cols)
			}
			cells := make([]string, len(fs))
			for j, f := range fs {
				cells[j] = string(f.Value.AppendJSON(nil))
			}
			if err := out.row(cells); err != nil {
				return err
			}
		}
		if err := out.flush(); err != nil {
			return err
		}
	}
	return nil
}
