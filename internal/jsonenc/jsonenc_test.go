package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestAppendStringEscapes(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\", "\x00\x1f\t\r\n", "é漢字🙂", "bad\xffutf8", "<tag>&", "\xff\xfe\xc3", "é\xc3"} {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, got, err)
		}
		want := s
		switch s {
		case "bad\xffutf8":
			want = "bad\ufffdutf8"
		case "\xff\xfe\xc3":
			want = "\ufffd\ufffd\ufffd"
		case "é\xc3":
			want = "é\ufffd"
		}
		if back != want {
			t.Fatalf("%q → %s → %q", s, got, back)
		}
		if v := ValidString(s); v != back {
			t.Fatalf("ValidString(%q) = %q; the JSON decodes to %q", s, v, back)
		}
	}
}
