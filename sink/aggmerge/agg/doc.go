// Package agg holds the column types, the typed values and the aggregate
// functions of the aggregation-merge table: sum, product, count, max, min,
// last_value, last_non_null_value, first_value, first_non_null_value,
// listagg, bool_and, bool_or, collect_set, rbm32, rbm64 and hll, with the
// Fluss/Paimon names and aliases.
//
// It performs no IO. A function is bound to a column type with New, which
// checks that the type is accepted; Merge and Retract are pure. Its refusals
// are typed for callers that place them: a *TypeError (wrapping ErrType) or
// a *ParamError, whose Reason is the message without the package prefix.
//
// Invariants:
//   - a value is Absent (never written), Null (a written null) or Present;
//     every function ignores a null input except last_value (a null
//     overwrites) and first_value (a null first value is kept);
//   - arithmetic never wraps: int64 overflow, a non-finite float64 result and
//     a decimal result beyond the column's precision are ErrOverflow errors;
//     decimals are never rounded on input;
//   - Idempotent and Associative state laws that the property tests check;
//     where CanRetract is true and the accumulator is present,
//     Retract(Merge(acc, x), x) == acc (exactly, for int64 and decimal sums
//     and counts; for products when no rounding or overflow occurred);
//   - sketch values are re-serialized on every merge, so a corrupt input is
//     an error, never stored;
//   - partials combine (Partial, Combine, MergePartial) to the same result as
//     merging inputs one by one; an Accumulator combines them too, keeping a
//     sketch decoded between writes, to the same result.
package agg
