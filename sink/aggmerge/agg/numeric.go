package agg

import (
	"fmt"
	"math"

	"github.com/shopspring/decimal"
)

type mergeFn = func(acc, in Value) (Value, error)

// arith is one numeric operation on each kind; each reports overflow or an
// inexact result through its error.
type arith struct {
	i func(a, b int64) (int64, error)
	f func(a, b float64) (float64, error)
	d func(a, b decimal.Decimal) (decimal.Decimal, error)
}

// apply runs op on two present values of t's kind and checks the result.
func (op arith) apply(t Type, a, b Value) (Value, error) {
	switch t.Kind {
	case KindInt64:
		r, err := op.i(a.i, b.i)
		if err != nil {
			return Value{}, err
		}
		return IntValue(r), nil
	case KindFloat64:
		r, err := op.f(a.Float(), b.Float())
		if err != nil {
			return Value{}, err
		}
		if math.IsInf(r, 0) || math.IsNaN(r) {
			return Value{}, fmt.Errorf("%w: float64 result %v of %v and %v", ErrOverflow, r, a.Float(), b.Float())
		}
		return FloatValue(r), nil
	case KindDecimal:
		r, err := op.d(a.d, b.d)
		if err != nil {
			return Value{}, err
		}
		return conformDecimal(t, r.RoundBank(int32(t.Scale)))
	}
	return Value{}, fmt.Errorf("%w: arithmetic on %s", ErrType, t)
}

func addInt(a, b int64) (int64, error) {
	r := a + b
	if (a >= 0) == (b >= 0) && (r >= 0) != (a >= 0) {
		return 0, fmt.Errorf("%w: int64 %d + %d", ErrOverflow, a, b)
	}
	return r, nil
}

func subInt(a, b int64) (int64, error) {
	if b == math.MinInt64 {
		if a >= 0 {
			return 0, fmt.Errorf("%w: int64 %d - %d", ErrOverflow, a, b)
		}
		return a - b, nil
	}
	return addInt(a, -b)
}

func mulInt(a, b int64) (int64, error) {
	if a == 0 || b == 0 {
		return 0, nil
	}
	r := a * b
	if r/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, fmt.Errorf("%w: int64 %d * %d", ErrOverflow, a, b)
	}
	return r, nil
}

func divInt(a, b int64) (int64, error) {
	if b == 0 {
		return 0, fmt.Errorf("%w: product by a zero divisor", ErrCannotRetract)
	}
	if a%b != 0 {
		return 0, fmt.Errorf("%w: product %d is not a multiple of %d", ErrCannotRetract, a, b)
	}
	if a == math.MinInt64 && b == -1 {
		return 0, fmt.Errorf("%w: int64 %d / %d", ErrOverflow, a, b)
	}
	return a / b, nil
}

var (
	add = arith{
		i: addInt,
		f: func(a, b float64) (float64, error) { return a + b, nil },
		d: func(a, b decimal.Decimal) (decimal.Decimal, error) { return a.Add(b), nil },
	}
	sub = arith{
		i: subInt,
		f: func(a, b float64) (float64, error) { return a - b, nil },
		d: func(a, b decimal.Decimal) (decimal.Decimal, error) { return a.Sub(b), nil },
	}
	mul = arith{
		i: mulInt,
		f: func(a, b float64) (float64, error) { return a * b, nil },
		d: func(a, b decimal.Decimal) (decimal.Decimal, error) { return a.Mul(b), nil },
	}
	div = arith{
		i: divInt,
		f: func(a, b float64) (float64, error) {
			if b == 0 {
				return 0, fmt.Errorf("%w: product by a zero divisor", ErrCannotRetract)
			}
			return a / b, nil
		},
		d: func(a, b decimal.Decimal) (decimal.Decimal, error) {
			if b.IsZero() {
				return decimal.Decimal{}, fmt.Errorf("%w: product by a zero divisor", ErrCannotRetract)
			}
			// The quotient must be exact at the accumulator's scale, or the
			// retraction would silently change the sum of money.
			q := a.DivRound(b, -a.Exponent())
			if !q.Mul(b).Equal(a) {
				return decimal.Decimal{}, fmt.Errorf("%w: product %s is not a multiple of %s", ErrCannotRetract, a, b)
			}
			return q, nil
		},
	}
)

// fold builds a merge that ignores null inputs, takes the first non-null
// input as is, and otherwise combines with op.
func fold(t Type, op arith) mergeFn {
	return func(acc, in Value) (Value, error) {
		if in.IsNull() {
			return acc, nil
		}
		if acc.IsNull() {
			return in, nil
		}
		return op.apply(t, acc, in)
	}
}

// unfold builds a retract that ignores null inputs and reads a null
// accumulator as the identity element unit.
func unfold(t Type, op arith, unit Value) mergeFn {
	return func(acc, in Value) (Value, error) {
		if in.IsNull() {
			return acc, nil
		}
		if acc.IsNull() {
			acc = unit
		}
		return op.apply(t, acc, in)
	}
}

// unit returns the value n (0 or 1) in t's kind.
func unit(t Type, n int64) Value {
	switch t.Kind {
	case KindFloat64:
		return FloatValue(float64(n))
	case KindDecimal:
		return Value{state: Present, kind: KindDecimal, d: decimal.New(n, 0).Round(int32(t.Scale))}
	}
	return IntValue(n)
}

func buildSum(t Type, _ map[string]string) (mergeFn, mergeFn, error) {
	return fold(t, add), unfold(t, sub, unit(t, 0)), nil
}

func buildProduct(t Type, _ map[string]string) (mergeFn, mergeFn, error) {
	return fold(t, mul), unfold(t, div, unit(t, 1)), nil
}

// buildCount counts non-null inputs: each adds one whatever its value, each
// retraction takes one away. A null accumulator counts as zero.
func buildCount(t Type, _ map[string]string) (mergeFn, mergeFn, error) {
	step := func(delta int64) mergeFn {
		return func(acc, in Value) (Value, error) {
			if in.IsNull() {
				return acc, nil
			}
			var n int64
			if !acc.IsNull() {
				n = acc.i
			}
			n, err := addInt(n, delta)
			if err != nil {
				return Value{}, fmt.Errorf("count: %w", err)
			}
			return IntValue(n), nil
		}
	}
	return step(1), step(-1), nil
}
