package pipelines

import (
	"testing"

	"github.com/ebbflow/ebbflow/runtime"
)

func TestRegistryCheck(t *testing.T) {
	ps := load(t, Options{}, "testdata/valid/datagen.yaml")
	r := NewRegistry()
	err := r.Check(ps[0])
	if err == nil || err.Error() != `job "clicks": this runner cannot build source datagen, sink table` {
		t.Fatalf("empty registry: %v", err)
	}
	r.RegisterSource("datagen", func(*Pipeline, int) (runtime.Source[Row], error) { return nil, nil })
	r.RegisterSink("table", func(*Pipeline, int) (runtime.Sink[Row], error) { return nil, nil })
	if err := r.Check(ps[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(load(t, Options{}, "testdata/valid/issue.yaml")[0]); err == nil || err.Error() != `job "revenue": this runner cannot build source kafka` {
		t.Fatalf("kafka missing: %v", err)
	}
	if _, ok := r.SourceFactory("datagen"); !ok {
		t.Error("datagen factory not found")
	}
	if _, ok := r.SinkFactory("nope"); ok {
		t.Error("unknown sink kind found")
	}
}
