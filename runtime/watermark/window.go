package watermark

import (
	"fmt"
	"time"
)

// MaxWindowsPerTime bounds Size/Slide: how many windows one event time may
// belong to (each is a write, so a record never fans out without limit).
const MaxWindowsPerTime = 1000

// Windows assigns event times to windows of event time [start, start+Size),
// with start a multiple of Slide since the Unix epoch (floor, also before
// it). Slide equal to Size (or 0) is tumbling: every time is in one window.
// A Slide below Size that divides it is hopping: every time is in
// Size/Slide windows, the last starting at the time rounded down to Slide.
type Windows struct {
	Size, Slide time.Duration
}

// Check reports what makes w unusable: a size or slide that is not
// positive, a slide beyond the size or not dividing it, or more than
// MaxWindowsPerTime windows per time.
func (w Windows) Check() error {
	slide := w.slide()
	switch {
	case w.Size <= 0:
		return fmt.Errorf("window size %s is not positive", w.Size)
	case slide < 0:
		return fmt.Errorf("window slide %s is negative", slide)
	case slide > w.Size:
		return fmt.Errorf("window slide %s exceeds the size %s (windows would leave gaps)", slide, w.Size)
	case w.Size%slide != 0:
		return fmt.Errorf("window size %s is not a multiple of the slide %s", w.Size, slide)
	case w.Size/slide > MaxWindowsPerTime:
		return fmt.Errorf("window size %s over slide %s puts every record in %d windows; at most %d", w.Size, slide, w.Size/slide, MaxWindowsPerTime)
	}
	return nil
}

func (w Windows) slide() time.Duration {
	if w.Slide == 0 {
		return w.Size
	}
	return w.Slide
}

// Count returns the number of windows every time belongs to.
func (w Windows) Count() int { return int(w.Size / w.slide()) }

// Starts appends to dst the starts of the windows holding event time t,
// earliest first, and returns it. Each window ends at start+Size. w must
// pass Check.
func (w Windows) Starts(dst []int64, t int64) []int64 {
	slide := int64(w.slide())
	last := t - t%slide
	if t%slide < 0 {
		last -= slide // floor for times before the epoch
	}
	for k := int64(w.Count()) - 1; k >= 0; k-- {
		dst = append(dst, last-k*slide)
	}
	return dst
}
