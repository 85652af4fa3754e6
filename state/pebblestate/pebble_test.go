package pebblestate

import (
	"testing"

	"github.com/ebbflow/ebbflow/state/statetest"
)

func TestPebbleBackend(t *testing.T) { statetest.Run(t, NewFactory(Options{})) }

func BenchmarkPebbleBackend(b *testing.B) { statetest.Bench(b, NewFactory(Options{})) }
