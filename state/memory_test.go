package state_test

import (
	"testing"

	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/state/statetest"
)

func TestMemoryBackend(t *testing.T) { statetest.Run(t, state.NewMemoryFactory()) }

func BenchmarkMemoryBackend(b *testing.B) { statetest.Bench(b, state.NewMemoryFactory()) }
