package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

func TestPingAnswers(t *testing.T) {
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := ping(ctx, b.Addrs()); err != nil {
		t.Fatalf("ping of a running broker: %v", err)
	}
}

func TestPingTimesOutWithoutBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if err := ping(ctx, []string{addr}); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
}
