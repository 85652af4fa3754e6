package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ebbflow/ebbflow/internal/jsonenc"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// lane is a share of a job's input whose records the job processes in
// order: a partition of a Kafka topic, or a lane of a datagen that feeds
// the job directly. Records of different lanes interleave in any order.
type lane struct {
	source int
	topic  string
	part   int64 // the partition, or the datagen lane's id
}

// model is the plain in-memory table that verify folds the input into: per
// key, every column of the sink folded with the column's function in input
// order, and also per lane for the columns whose result depends on the
// order in which lanes interleave.
type model struct {
	keyNames []string
	cols     []modelCol
	rows     map[string]*modelRow // by key as JSON
}

type modelCol struct {
	col  aggmerge.Column // as the table has it
	fn   *agg.Func
	kind colKind
}

// colKind says how a column's expected value is compared.
type colKind uint8

const (
	exact    colKind = iota // the fold in input order, exactly
	floatSum                // a float64 sum: equal up to rounding
	floatMul                // a float64 product: equal up to rounding
	pick                    // first/last value: one lane's fold when lanes interleave
	list                    // listagg: the same elements when lanes interleave
)

type modelRow struct {
	all   []agg.Value // the fold of every record, in input order
	mag   []float64   // floatSum: the sum of the absolute inputs
	lanes map[lane][]agg.Value
}

func newModel(t *pipelines.Table) (*model, error) {
	m := &model{rows: map[string]*modelRow{}}
	for _, k := range t.Key {
		m.keyNames = append(m.keyNames, k.Name)
	}
	for _, c := range t.Columns {
		fn, err := agg.New(c.Func, c.Type, c.Params)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		mc := modelCol{col: aggmerge.Column{Name: c.Name, Type: c.Type, Func: c.Func, Params: c.Params}, fn: fn}
		switch name := fn.Name(); {
		case c.Type.Kind == agg.KindFloat64 && name == "sum":
			mc.kind = floatSum
		case c.Type.Kind == agg.KindFloat64 && name == "product":
			mc.kind = floatMul
		case strings.HasPrefix(name, "first_") || strings.HasPrefix(name, "last_"):
			mc.kind = pick
		case name == "listagg":
			mc.kind = list
		}
		m.cols = append(m.cols, mc)
	}
	return m, nil
}

// keyJSON renders a primary key as the changelog's record key does: a JSON
// object of the key columns, in order.
func keyJSON(names []string, key []agg.Value) string {
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, n)
		b = append(b, ':')
		b = agg.AppendJSON(b, key[i])
	}
	return string(append(b, '}'))
}

// add folds one write of lane l into the model (key and vals are not
// kept); an error is one the table would meet too (an overflow), which
// fails the job.
func (m *model) add(l lane, key, vals []agg.Value) error {
	k := keyJSON(m.keyNames, key)
	r := m.rows[k]
	if r == nil {
		r = &modelRow{all: make([]agg.Value, len(m.cols)), mag: make([]float64, len(m.cols)), lanes: map[lane][]agg.Value{}}
		m.rows[k] = r
	}
	ln := r.lanes[l]
	if ln == nil {
		ln = make([]agg.Value, len(m.cols))
		r.lanes[l] = ln
	}
	for i, c := range m.cols {
		in, err := agg.Conform(c.col.Type, vals[i])
		if err != nil {
			return fmt.Errorf("key %s column %s: %w", k, c.col.Name, err)
		}
		if r.all[i], err = c.fn.Merge(r.all[i], in); err != nil {
			return fmt.Errorf("key %s column %s: %w", k, c.col.Name, err)
		}
		if c.kind == floatSum && !in.IsNull() {
			r.mag[i] += math.Abs(in.Float())
		}
		if c.kind == pick {
			if ln[i], err = c.fn.Merge(ln[i], in); err != nil {
				return fmt.Errorf("key %s column %s: %w", k, c.col.Name, err)
			}
		}
	}
	return nil
}

// expectation is what one column of one key must be.
type expectation struct {
	col   *modelCol
	cell  string   // the fold in input order, rendered
	mag   float64  // floatSum
	one   []string // pick across lanes: one of these
	elems []string // list across lanes: these elements, in any order
}

// expect returns what the columns of key must be (nil: no row).
func (m *model) expect(key string) ([]expectation, error) {
	r := m.rows[key]
	if r == nil {
		return nil, nil
	}
	out := make([]expectation, len(m.cols))
	for i := range m.cols {
		c := &m.cols[i]
		cell, err := valueCell(c.col, r.all[i])
		if err != nil {
			return nil, err
		}
		e := expectation{col: c, cell: cell, mag: r.mag[i]}
		if len(r.lanes) > 1 {
			switch c.kind {
			case pick:
				if e.one, err = m.picks(c, i, r); err != nil {
					return nil, err
				}
			case list:
				e.elems = listElems(c, cell)
			}
		}
		out[i] = e
	}
	return out, nil
}

// picks returns the values a first/last column may hold when lanes
// interleave: the fold of one of the lanes (for the non-null variants, of
// one whose fold is not null, unless all are).
func (m *model) picks(c *modelCol, i int, r *modelRow) ([]string, error) {
	var all, nonNull []string
	for _, ln := range r.lanes {
		cell, err := valueCell(c.col, ln[i])
		if err != nil {
			return nil, err
		}
		all = append(all, cell)
		if !ln[i].IsNull() {
			nonNull = append(nonNull, cell)
		}
	}
	if strings.Contains(c.fn.Name(), "non_null") && len(nonNull) > 0 {
		all = nonNull
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// listElems splits a listagg cell into its elements, sorted ("null": none).
func listElems(c *modelCol, cell string) []string {
	if cell == "null" {
		return nil
	}
	s := unquote(cell)
	es := strings.Split(s, c.fn.Params()["delimiter"])
	slices.Sort(es)
	return es
}

// holds reports whether got, a rendered cell, meets the expectation.
func (e *expectation) holds(got string) bool {
	switch {
	case e.one != nil:
		return slices.Contains(e.one, got)
	case e.col.kind == list && e.elems != nil:
		return slices.Equal(listElems(e.col, got), e.elems)
	case e.col.kind == floatSum || e.col.kind == floatMul:
		if got == e.cell {
			return true
		}
		a, err1 := strconv.ParseFloat(got, 64)
		b, err2 := strconv.ParseFloat(e.cell, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		scale := max(1, e.mag)
		if e.col.kind == floatMul {
			scale = max(1, math.Abs(a), math.Abs(b))
		}
		return math.Abs(a-b) <= 1e-9*scale
	}
	return got == e.cell
}

// String says what is expected, for the listing of differences.
func (e *expectation) String() string {
	switch {
	case e.one != nil:
		return "one of " + strings.Join(e.one, ", ")
	case e.col.kind == list && e.elems != nil:
		return e.cell + " (elements in any order)"
	case e.col.kind == floatSum || e.col.kind == floatMul:
		return e.cell + " (up to rounding)"
	}
	return e.cell
}
