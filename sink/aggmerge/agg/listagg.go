package agg

// buildListagg appends inputs separated by the delimiter parameter; nulls
// are skipped, an empty string is appended as an empty item.
func buildListagg(_ Type, p map[string]string) (mergeFn, mergeFn, error) {
	delim := p["delimiter"]
	if delim == "" {
		return nil, nil, &ParamError{Param: "delimiter", Problem: "must not be empty"}
	}
	return func(acc, in Value) (Value, error) {
		if in.IsNull() {
			return acc, nil
		}
		if acc.IsNull() {
			return in, nil
		}
		return StringValue(acc.s + delim + in.s), nil
	}, nil, nil
}
