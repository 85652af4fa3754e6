package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestAppendStringEscapes(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\", "\x00\x1f\t\r\n", "é漢字🙂", "bad\xffutf8", "<tag>&"} {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, got, err)
		}
		want := s
		if s == "bad\xffutf8" {
			want = "bad\ufffdutf8"
		}
		if back != want {
			t.Fatalf("%q → %s → %q", s, got, back)
		}
	}
}
