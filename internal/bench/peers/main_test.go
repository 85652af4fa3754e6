package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompare: the benchmark stops on any wrong result, so its check must
// see a missing key, a wrong value and a key that is not in the input.
func TestCompare(t *testing.T) {
	want := map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, 5}}
	if err := compare(want, map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, 5}}); err != nil {
		t.Fatalf("equal results: %v", err)
	}
	for name, got := range map[string]map[string]agg{
		"missing": {"u1": {10, 2, 7}},
		"value":   {"u1": {10, 2, 7}, "u2": {5, 2, 5}},
		"extra":   {"u1": {10, 2, 7}, "u2": {5, 1, 5}, "u3": {1, 1, 1}},
	} {
		if err := compare(want, got); err == nil {
			t.Errorf("%s: no difference reported", name)
		}
	}
}

// TestResultFormats reads the peers' result file and the ebbflow row as the
// benchmark does.
func TestResultFormats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.csv")
	if err := os.WriteFile(path, []byte("u1,10,2,7\nu2,5,1,-3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readResultFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, -3}}, got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("u1,10,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readResultFile(path); err == nil || !strings.Contains(err.Error(), "sum,count,max") {
		t.Fatalf("short line: %v", err)
	}
	user, a, err := parseRow([]byte(`{"user":"u9","total":12,"n":3,"largest":9}`))
	if err != nil || user != "u9" || a != (agg{12, 3, 9}) {
		t.Fatalf("parseRow = %q %v %v", user, a, err)
	}
}

// rec is a generated record as the systems read it.
type rec struct {
	User       string
	Amount, Ts int64
}

// generated returns g's records, parsed back from their JSON, and its oracle.
func generated(t *testing.T, g gen) ([]rec, map[string]agg) {
	var recs []rec
	oracle := g.generate(func(user string, value []byte) {
		var r rec
		if err := json.Unmarshal(value, &r); err != nil || r.User != user {
			t.Fatalf("record %s (key %s): %v", value, user, err)
		}
		recs = append(recs, r)
	})
	return recs, oracle
}

// model is the plain aggregate of records by key.
func model(recs []rec, key func(rec) string) map[string]agg {
	m := map[string]agg{}
	for _, r := range recs {
		a, ok := m[key(r)]
		if !ok {
			a.max = r.Amount
		}
		m[key(r)] = agg{a.sum + r.Amount, a.count + 1, max(a.max, r.Amount)}
	}
	return m
}

// TestWindowedOracle: the windowed variant's exact aggregates equal a plain
// model recomputed from the JSON records the systems read (ts parsed back,
// its window by division), every record lags the largest ts before it by
// less than the disorder every system is told (so none is late), many do,
// and each (user, window) folds several records, as the docs promise.
func TestWindowedOracle(t *testing.T) {
	g := gen{records: 20_000, users: 100, seed: 17, window: 10 * time.Second, disorder: time.Second}
	recs, oracle := generated(t, g)
	if err := compare(model(recs, func(r rec) string { return fmt.Sprintf("%s@%d", r.User, r.Ts/10_000*10_000) }), oracle); err != nil {
		t.Fatalf("oracle against the model: %v", err)
	}
	largest, lagging := int64(0), 0
	for _, r := range recs {
		if lag := largest - r.Ts; lag >= g.disorder.Milliseconds() {
			t.Fatalf("ts %d lags the largest %d by %d ms, not less than the disorder %s", r.Ts, largest, lag, g.disorder)
		} else if lag > 0 {
			lagging++
		}
		largest = max(largest, r.Ts)
	}
	if lagging < g.records/10 {
		t.Fatalf("only %d of %d records lag behind the largest ts: no disorder to speak of", lagging, g.records)
	}
	if per := float64(g.records) / float64(len(oracle)); per < 5 {
		t.Fatalf("%.1f records per (user, window): want several", per)
	}

	// Without disorder ts is in order, and without windows too: then the
	// seed makes the input of before windows existed, per user.
	g.disorder = 0
	inOrder, _ := generated(t, g)
	g.window = 0
	plain, perUser := generated(t, g)
	for i := range plain {
		if want := (rec{inOrder[i].User, inOrder[i].Amount, 1_700_000_000_000 + int64(i)}); plain[i] != want || inOrder[i] != want {
			t.Fatalf("record %d: %v without windows, %v in order, want %v", i, plain[i], inOrder[i], want)
		}
	}
	if err := compare(model(plain, func(r rec) string { return r.User }), perUser); err != nil {
		t.Fatalf("oracle without windows: %v", err)
	}
}

// TestResultKey: a window starts at a multiple of its length since the Unix
// epoch, also before it, as in ebbflow, Flink and Kafka Streams.
func TestResultKey(t *testing.T) {
	for _, c := range []struct {
		ts     int64
		window time.Duration
		want   string
	}{
		{1_700_000_123_456, 0, "u1"},
		{1_700_000_123_456, 10 * time.Minute, "u1@1699999800000"},
		{1_700_000_400_000, 10 * time.Minute, "u1@1700000400000"},
		{1_700_000_399_999, 10 * time.Minute, "u1@1699999800000"},
		{-1, time.Second, "u1@-1000"},
		{-1000, time.Second, "u1@-1000"},
	} {
		if got := resultKey("u1", c.ts, c.window); got != c.want {
			t.Errorf("resultKey(u1, %d, %s) = %s, want %s", c.ts, c.window, got, c.want)
		}
	}
	// ebbflow's windowed row names the same key.
	key, a, err := parseRow([]byte(`{"user":"u9","window_start":"2023-11-14T22:20:00Z","window_end":"2023-11-14T22:30:00Z","total":12,"n":3,"largest":9}`))
	if want := resultKey("u9", 1_700_000_400_000, 10*time.Minute); err != nil || key != want || a != (agg{12, 3, 9}) {
		t.Fatalf("parseRow = %q %v %v, want %s", key, a, err, want)
	}
}
