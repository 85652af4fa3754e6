package watermark

import (
	"math"
	"time"
)

const (
	// Min is the watermark of a stream that has none yet.
	Min int64 = math.MinInt64
	// Max is the end of event time: the watermark a source emits when its
	// input ended. Every timer fires at it.
	Max int64 = math.MaxInt64
)

// EndOfTime is Max as a time (in the year 2262).
var EndOfTime = time.Unix(0, Max).UTC()

// minTime is the earliest time UnixNano represents above Min.
var minTime = time.Unix(0, Min+1)

// FromTime returns t as event time: nanoseconds since the Unix epoch. The
// zero time is Min and EndOfTime (or later) is Max; times before the year
// 1678 are clamped just above Min.
func FromTime(t time.Time) int64 {
	switch {
	case t.IsZero():
		return Min
	case t.Before(minTime):
		return Min + 1
	case !t.Before(EndOfTime):
		return Max
	}
	return t.UnixNano()
}

// ToTime returns event time w as a time in UTC: the zero time for Min,
// EndOfTime for Max.
func ToTime(w int64) time.Time {
	if w == Min {
		return time.Time{}
	}
	return time.Unix(0, w).UTC()
}

// FromMillis returns Unix milliseconds (a Kafka timestamp) as event time,
// clamped like FromTime.
func FromMillis(ms int64) int64 {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms >= limit:
		return Max
	case ms <= -limit:
		return Min + 1
	}
	return ms * int64(time.Millisecond)
}

// Format renders w for logs and test output: "min", "max" or the RFC 3339
// time in UTC with nanoseconds.
func Format(w int64) string {
	switch w {
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return ToTime(w).Format(time.RFC3339Nano)
}
