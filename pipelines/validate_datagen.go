package pipelines

import (
	"fmt"
	"slices"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

func (v *validator) datagen(path string, g *DatagenSource) ([]Field, bool) {
	if g.Topic != "" {
		v.connection(path+".kafka", &g.Kafka)
	}
	ok := len(g.Fields) > 0
	if !ok {
		v.fail(path+".fields", "needs at least one field")
	}
	fields := make([]Field, 0, len(g.Fields))
	for i := range g.Fields {
		f := &g.Fields[i]
		fp := path + ".fields." + f.Name
		t, good := v.generator(fp, f)
		ok = v.ident(fp, f.Name) && good && ok
		fields = append(fields, Field{Name: f.Name, Type: t})
	}
	return fields, ok
}

// generator checks one generated field and returns its type.
func (v *validator) generator(path string, f *GenField) (agg.Type, bool) {
	var t agg.Type
	var allowed []agg.Kind
	switch {
	case f.Sequence != nil:
		t, allowed = agg.Int64, []agg.Kind{agg.KindInt64, agg.KindFloat64, agg.KindDecimal, agg.KindString}
	case f.Uniform != nil:
		t, allowed = agg.Int64, []agg.Kind{agg.KindInt64, agg.KindFloat64, agg.KindDecimal}
		if f.Uniform.Min.IsFloat || f.Uniform.Max.IsFloat {
			t, allowed = agg.Float64, []agg.Kind{agg.KindFloat64, agg.KindDecimal}
		}
		if v.given(path+".uniform.min") && v.given(path+".uniform.max") && f.Uniform.Min.Float > f.Uniform.Max.Float {
			v.fail(path+".uniform", "min %v exceeds max %v", f.Uniform.Min.Float, f.Uniform.Max.Float)
			return t, false
		}
	case f.OneOf != nil:
		t, allowed = agg.String, []agg.Kind{agg.KindString, agg.KindInt64, agg.KindFloat64, agg.KindBool,
			agg.KindDecimal, agg.KindTimestamp, agg.KindBytes}
	case f.Now:
		t, allowed = agg.Timestamp, []agg.Kind{agg.KindTimestamp}
	default:
		if v.given(path + ".now") {
			v.fail(path+".now", "now: false generates nothing; write now: true or another generator")
		}
		return t, false
	}
	if f.Type != nil {
		if !slices.Contains(allowed, f.Type.Kind) {
			v.fail(path+".type", "this generator cannot give %s values", f.Type)
			return t, false
		}
		t = *f.Type
	}
	ok := true
	if u := f.Uniform; u != nil && t.Kind == agg.KindDecimal {
		for _, b := range []struct {
			key string
			n   Number
		}{{"min", u.Min}, {"max", u.Max}} {
			if _, err := agg.Conform(t, agg.DecimalValue(decimal.NewFromFloat(b.n.Float).Round(int32(t.Scale)))); err != nil {
				v.fail(path+".uniform."+b.key, "%v does not fit %s", b.n.Float, t)
				ok = false
			}
		}
	}
	if f.OneOf != nil {
		if len(f.OneOf) == 0 {
			v.fail(path+".one_of", "needs at least one value")
			ok = false
		}
		for i, s := range f.OneOf {
			if err := checkLiteral(t, s); err != nil {
				v.fail(fmt.Sprintf("%s.one_of[%d]", path, i), "%v", err)
				ok = false
			}
		}
	}
	if f.Weights != nil {
		sum := 0.0
		for _, w := range f.Weights {
			sum += w
			if w < 0 {
				sum = -1
				break
			}
		}
		switch {
		case f.OneOf == nil:
			v.fail(path+".weights", "weights go with one_of")
		case len(f.Weights) != len(f.OneOf):
			v.fail(path+".weights", "has %d weights for %d one_of values", len(f.Weights), len(f.OneOf))
		case sum <= 0:
			v.fail(path+".weights", "weights must not be negative and must not all be zero")
		}
	}
	return t, ok
}

// checkLiteral checks that s reads as a value of type t.
func checkLiteral(t agg.Type, s string) error {
	v, err := literal(t, s)
	if d, ok := v.(decimal.Decimal); ok && err == nil {
		_, err = agg.Conform(t, agg.DecimalValue(d))
	}
	if err != nil {
		return fmt.Errorf("%q is not of type %s", s, t)
	}
	return nil
}
