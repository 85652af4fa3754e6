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

// minTime and maxTime bound the times UnixNano represents.
var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64-1)
)

// FromTime returns t as event time: nanoseconds since the Unix epoch. The
// zero time is Min; times outside the years 1678 to 2262 are clamped just
// inside Min and Max.
func FromTime(t time.Time) int64 {
	switch {
	case t.IsZero():
		return Min
	case t.Before(minTime):
		return Min + 1
	case t.After(maxTime):
		return Max - 1
	}
	return t.UnixNano()
}

// ToTime returns event time w as a time in UTC: the zero time for Min.
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
		return Max - 1
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
