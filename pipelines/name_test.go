package pipelines

import "testing"

// TestCheckName: a job or table name names a folder, so it is never empty,
// a path or a path step.
func TestCheckName(t *testing.T) {
	for _, ok := range []string{"orders", "a.b_c-1", "9lives", "a..b"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "/abs", `a\b`, ".hidden", "-x", "a b", "é"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", bad)
		}
	}
}
