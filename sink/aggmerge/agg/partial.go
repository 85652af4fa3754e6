package agg

import "fmt"

// Partial aggregates let a writer pre-aggregate the inputs of one key in
// memory and write the table once per key per flush. For an associative
// function a partial is just an input: Combine is Merge. count is not
// associative over inputs (it counts them), so its partial is the number of
// non-null inputs, and MergePartial adds it. The law, tested for every
// function: folding inputs x1..xn into acc with Merge equals
// MergePartial(acc, Combine(...Combine(Partial(x1), Partial(x2))..., Partial(xn))).

// CanCombine reports whether inputs may be pre-aggregated.
func (f *Func) CanCombine() bool { return f.def.associative || f.def.name == "count" }

// Partial turns one input into a partial aggregate.
func (f *Func) Partial(in Value) Value {
	if f.def.name == "count" {
		if in.IsNull() {
			return NullValue()
		}
		return IntValue(1)
	}
	return in
}

// Combine folds partial b into partial a (a came first).
func (f *Func) Combine(a, b Value) (Value, error) {
	if !f.CanCombine() {
		return Value{}, fmt.Errorf("%w: function %s cannot pre-aggregate", ErrType, f.def.name)
	}
	if f.def.name == "count" {
		return addCounts(a, b)
	}
	return f.merge(a, b)
}

// MergePartial folds a partial aggregate into the stored accumulator.
func (f *Func) MergePartial(acc, p Value) (Value, error) {
	if f.def.name == "count" {
		if p.IsNull() {
			return acc, nil
		}
		return addCounts(acc, p)
	}
	return f.merge(acc, p)
}

// addCounts adds two counts; null counts as zero, and two nulls stay null.
func addCounts(a, b Value) (Value, error) {
	if b.IsNull() {
		return a, nil
	}
	if a.IsNull() {
		return IntValue(b.i), nil
	}
	n, err := addInt(a.i, b.i)
	if err != nil {
		return Value{}, fmt.Errorf("count: %w", err)
	}
	return IntValue(n), nil
}
