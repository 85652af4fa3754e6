package agg

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"

	"github.com/ebbflow/ebbflow/internal/jsonenc"
)

// TimeLayout is how timestamps are written: RFC 3339 in UTC with exactly
// six fractional digits (microseconds, the table's precision).
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// AppendJSON appends one value as JSON: null (absent or null), true/false, int64
// and float64 as JSON numbers, decimal as a string (exact digits, the
// column's scale), string, bytes as standard base64 with padding, timestamp
// as TimeLayout, set<string> as an array of strings.
func AppendJSON(dst []byte, v Value) []byte {
	if v.IsNull() {
		return append(dst, "null"...)
	}
	switch v.Kind() {
	case KindBool:
		return strconv.AppendBool(dst, v.Bool())
	case KindInt64:
		return strconv.AppendInt(dst, v.Int(), 10)
	case KindFloat64:
		f := v.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) { // never stored; keep the JSON valid anyway
			return append(dst, "null"...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case KindDecimal:
		d := v.Decimal() // conformed: its exponent is minus the column's scale
		dst = append(dst, '"')
		dst = append(dst, d.StringFixed(max(-d.Exponent(), 0))...)
		return append(dst, '"')
	case KindString:
		return jsonenc.AppendString(dst, v.Str())
	case KindBytes:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes())
		return append(dst, '"')
	case KindTimestamp:
		dst = append(dst, '"')
		dst = v.Time().AppendFormat(dst, TimeLayout)
		return append(dst, '"')
	case KindStringSet:
		dst = append(dst, '[')
		for i, s := range v.Set() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonenc.AppendString(dst, s)
		}
		return append(dst, ']')
	}
	panic(fmt.Sprintf("agg: value of kind %s", v.Kind()))
}
