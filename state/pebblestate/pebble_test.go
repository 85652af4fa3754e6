package pebblestate

import (
	"testing"

	"github.com/ebbflow/ebbflow/state/statetest"
)

func TestPebbleBackend(t *testing.T) { statetest.Run(t, NewFactory(Options{})) }
