package watermark

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

func TestWindowsStarts(t *testing.T) {
	at := func(s string) int64 {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UnixNano()
	}
	for _, c := range []struct {
		w      Windows
		t      string
		starts []string
	}{
		{Windows{Size: time.Minute}, "2026-12-02T01:00:00Z", []string{"2026-12-02T01:00:00Z"}},
		{Windows{Size: time.Minute}, "2026-12-02T01:00:59.999Z", []string{"2026-12-02T01:00:00Z"}},
		{Windows{Size: time.Minute, Slide: time.Minute}, "2026-12-02T01:01:00Z", []string{"2026-12-02T01:01:00Z"}},
		{Windows{Size: time.Minute}, "1969-12-31T23:59:30Z", []string{"1969-12-31T23:59:00Z"}}, // before the epoch: floor, not toward zero
		{Windows{Size: time.Minute}, "1969-12-31T23:59:00Z", []string{"1969-12-31T23:59:00Z"}},
		{Windows{Size: time.Minute, Slide: 20 * time.Second}, "2026-12-02T01:00:45Z",
			[]string{"2026-12-02T01:00:00Z", "2026-12-02T01:00:20Z", "2026-12-02T01:00:40Z"}},
		{Windows{Size: time.Minute, Slide: 20 * time.Second}, "2026-12-02T01:00:40Z",
			[]string{"2026-12-02T01:00:00Z", "2026-12-02T01:00:20Z", "2026-12-02T01:00:40Z"}}, // a window starts at the time itself
		{Windows{Size: time.Minute, Slide: 20 * time.Second}, "1969-12-31T23:59:59Z",
			[]string{"1969-12-31T23:59:00Z", "1969-12-31T23:59:20Z", "1969-12-31T23:59:40Z"}},
	} {
		var want []int64
		for _, s := range c.starts {
			want = append(want, at(s))
		}
		if got := c.w.Starts(nil, at(c.t)); !slices.Equal(got, want) {
			t.Errorf("%+v.Starts(%s) = %v, want %v", c.w, c.t, got, want)
		}
	}
}

// TestWindowsModel: a time is in exactly the windows [k*slide, k*slide+size)
// that hold it, found by trying every k near it.
func TestWindowsModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for range 2000 {
		slide := time.Duration(1+rng.Intn(7)) * time.Millisecond
		w := Windows{Size: slide * time.Duration(1+rng.Intn(5)), Slide: slide}
		ts := int64(rng.Intn(200)-100) * int64(time.Millisecond) / 3
		var want []int64
		for k := int64(-200); k <= 200; k++ {
			if s := k * int64(slide); s <= ts && ts < s+int64(w.Size) {
				want = append(want, s)
			}
		}
		if got := w.Starts(nil, ts); !slices.Equal(got, want) || len(got) != w.Count() {
			t.Fatalf("%+v.Starts(%d) = %v, want %v", w, ts, got, want)
		}
	}
}

func TestWindowsCheck(t *testing.T) {
	for _, c := range []struct {
		w   Windows
		bad bool
	}{
		{Windows{Size: time.Minute}, false},
		{Windows{Size: time.Minute, Slide: 10 * time.Second}, false},
		{Windows{Size: 0}, true},
		{Windows{Size: time.Minute, Slide: -time.Second}, true},
		{Windows{Size: time.Minute, Slide: 2 * time.Minute}, true},
		{Windows{Size: time.Minute, Slide: 7 * time.Second}, true},
		{Windows{Size: time.Hour, Slide: time.Second}, true}, // 3600 windows per record
	} {
		if err := c.w.Check(); (err != nil) != c.bad {
			t.Errorf("%+v.Check() = %v, want bad %v", c.w, err, c.bad)
		}
	}
}
