package pipelines

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// Generator makes the records of a datagen source. Record n is a pure
// function of the seed and n (except now: fields), so a source that
// checkpoints how many records it made replays exactly the same ones.
type Generator struct {
	seed  uint64
	width int
	gens  []gen
}

type gen struct {
	slot  int
	typ   agg.Type
	spec  *GenField
	nulls float64
	// values are one_of's elements as field values; cum their cumulative
	// weights.
	values []any
	cum    []float64
}

// NewGenerator returns the generator of p.Spec.Sources[i], which must be a
// datagen source.
func (p *Pipeline) NewGenerator(i int) (*Generator, error) {
	d := p.Spec.Sources[i].Datagen
	if d == nil {
		return nil, fmt.Errorf("source %d of job %q is not a datagen source", i, p.Spec.Job.Name)
	}
	g := &Generator{seed: uint64(d.Seed), width: p.Width}
	for j := range d.Fields {
		spec := &d.Fields[j]
		f, _ := p.Input.Field(spec.Name)
		ge := gen{slot: f.Slot, typ: f.Type, spec: spec, nulls: spec.Null}
		total := 0.0
		for k, s := range spec.OneOf {
			v, err := literal(f.Type, s)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", spec.Name, err)
			}
			w := 1.0
			if spec.Weights != nil {
				w = spec.Weights[k]
			}
			total += w
			ge.values, ge.cum = append(ge.values, v), append(ge.cum, total)
		}
		g.gens = append(g.gens, ge)
	}
	return g, nil
}

// Row returns record n.
func (g *Generator) Row(n int64) Row {
	r := make(Row, g.width)
	for i := range g.gens {
		ge := &g.gens[i]
		h := mix(g.seed, uint64(n), uint64(i))
		if ge.nulls > 0 && unit(mix(h, 1, 0)) < ge.nulls {
			continue
		}
		r[ge.slot] = ge.value(n, h)
	}
	return r
}

func (ge *gen) value(n int64, h uint64) any {
	s := ge.spec
	switch {
	case s.Sequence != nil:
		return ge.fromInt(s.Sequence.Start + n*s.Sequence.Step)
	case s.Uniform != nil && !s.Uniform.Min.IsFloat && !s.Uniform.Max.IsFloat:
		lo, hi := s.Uniform.Min.Int, s.Uniform.Max.Int
		if span := uint64(hi-lo) + 1; span != 0 { // 0: the whole int64 range
			h %= span
		}
		return ge.fromInt(lo + int64(h))
	case s.Uniform != nil:
		lo, hi := s.Uniform.Min.Float, s.Uniform.Max.Float
		x := lo + unit(h)*(hi-lo)
		if ge.typ.Kind == agg.KindDecimal {
			return decimal.NewFromFloat(x).Round(int32(ge.typ.Scale))
		}
		return x
	case s.OneOf != nil:
		u := unit(h) * ge.cum[len(ge.cum)-1]
		for k, c := range ge.cum {
			if u < c {
				return ge.values[k]
			}
		}
		return ge.values[len(ge.values)-1]
	}
	return time.Now().UTC() // now: true
}

// fromInt gives an integer in the field's type.
func (ge *gen) fromInt(i int64) any {
	switch ge.typ.Kind {
	case agg.KindFloat64:
		return float64(i)
	case agg.KindDecimal:
		return decimal.NewFromInt(i)
	case agg.KindString:
		return strconv.FormatInt(i, 10)
	}
	return i
}

// mix hashes its inputs (splitmix64 finalizer over a combination).
func mix(a, b, c uint64) uint64 {
	x := a*0x9e3779b97f4a7c15 ^ b*0xbf58476d1ce4e5b9 ^ c*0x94d049bb133111eb
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// literal reads a one_of element as a value of type t (checked by the
// validator, so an error here is a broken invariant reported as such).
func literal(t agg.Type, s string) (any, error) {
	var (
		v   any
		err error
	)
	switch t.Kind {
	case agg.KindString:
		v = s
	case agg.KindInt64:
		v, err = strconv.ParseInt(s, 10, 64)
	case agg.KindFloat64:
		var f float64
		f, err = strconv.ParseFloat(s, 64)
		if err == nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
			err = fmt.Errorf("%q is not finite", s)
		}
		v = f
	case agg.KindBool:
		v, err = strconv.ParseBool(s)
	case agg.KindTimestamp:
		v, err = time.Parse(time.RFC3339Nano, s)
	case agg.KindDecimal:
		v, err = decimal.NewFromString(s)
	case agg.KindBytes:
		v = []byte(s)
	}
	return v, err
}
