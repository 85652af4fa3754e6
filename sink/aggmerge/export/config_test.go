package export

import (
	"strings"
	"testing"
	"time"
)

func TestTransactionTimeout(t *testing.T) {
	for _, c := range []struct{ ckpt, want time.Duration }{
		{0, 10 * time.Second},
		{time.Second, 12 * time.Second},
		{time.Minute, 130 * time.Second},
		{time.Hour, 15 * time.Minute},
	} {
		if got := transactionTimeout(c.ckpt); got != c.want {
			t.Errorf("checkpoint %v: timeout %v, want %v", c.ckpt, got, c.want)
		}
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	_, err := New(Config{Mode: "later", Format: "csv"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"no table", "no table name", "no brokers", `unknown mode "later"`, `unknown format "csv"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
