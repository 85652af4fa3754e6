package agg

import "slices"

// buildPick keeps the larger (dir +1) or smaller (dir -1) value; nulls are
// ignored.
func buildPick(dir int) func(Type, map[string]string) (mergeFn, mergeFn, error) {
	return func(Type, map[string]string) (mergeFn, mergeFn, error) {
		return func(acc, in Value) (Value, error) {
			if in.IsNull() {
				return acc, nil
			}
			if acc.IsNull() || compare(in, acc)*dir > 0 {
				return in, nil
			}
			return acc, nil
		}, nil, nil
	}
}

// buildLast keeps the latest input. With ignoreNulls a null input changes
// nothing; without it a null input overwrites. Retracting the current value clears the column; retracting any
// other value changes nothing, as that value was already overwritten.
func buildLast(ignoreNulls bool) func(Type, map[string]string) (mergeFn, mergeFn, error) {
	return func(Type, map[string]string) (mergeFn, mergeFn, error) {
		merge := func(acc, in Value) (Value, error) {
			if in.IsNull() {
				if ignoreNulls {
					return acc, nil
				}
				return NullValue(), nil
			}
			return in, nil
		}
		retract := func(acc, in Value) (Value, error) {
			if in.IsNull() && ignoreNulls {
				return acc, nil
			}
			if acc.IsNull() == in.IsNull() && (acc.IsNull() || acc.Equal(in)) {
				return Value{}, nil
			}
			return acc, nil
		}
		return merge, retract, nil
	}
}

// buildFirst keeps the first input. Without ignoreNulls the first input
// written is kept even when it is null (the column's state becomes Null and
// stays); with ignoreNulls nulls are skipped until a value arrives.
func buildFirst(ignoreNulls bool) func(Type, map[string]string) (mergeFn, mergeFn, error) {
	return func(Type, map[string]string) (mergeFn, mergeFn, error) {
		return func(acc, in Value) (Value, error) {
			if ignoreNulls {
				if acc.IsNull() && !in.IsNull() {
					return in, nil
				}
				return acc, nil
			}
			if acc.state != Absent {
				return acc, nil
			}
			if in.IsNull() {
				return NullValue(), nil
			}
			return in, nil
		}, nil, nil
	}
}

// buildBool folds with AND (and=true) or OR; nulls are ignored.
func buildBool(and bool) func(Type, map[string]string) (mergeFn, mergeFn, error) {
	return func(Type, map[string]string) (mergeFn, mergeFn, error) {
		return func(acc, in Value) (Value, error) {
			if in.IsNull() {
				return acc, nil
			}
			if acc.IsNull() {
				return in, nil
			}
			if and {
				return BoolValue(acc.Bool() && in.Bool()), nil
			}
			return BoolValue(acc.Bool() || in.Bool()), nil
		}, nil, nil
	}
}

// buildCollectSet unions sets; nulls are ignored.
func buildCollectSet(Type, map[string]string) (mergeFn, mergeFn, error) {
	return func(acc, in Value) (Value, error) {
		if in.IsNull() {
			return acc, nil
		}
		if acc.IsNull() {
			return in, nil
		}
		u := make([]string, 0, len(acc.set)+len(in.set))
		u = append(append(u, acc.set...), in.set...)
		slices.Sort(u)
		return Value{state: Present, kind: KindStringSet, set: slices.Compact(u)}, nil
	}, nil, nil
}
