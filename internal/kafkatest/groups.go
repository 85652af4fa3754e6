package kafkatest

import (
	"fmt"
	"testing"
	"time"
)

// WaitGroupShared waits until consumer group has settled (Stable) with
// members members, each of which has partitions assigned.
func WaitGroupShared(t testing.TB, brokers []string, group string, members int) {
	t.Helper()
	adm := Admin(t, brokers)
	ctx := timeoutContext(t)
	last := "not described"
	for {
		described, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			g := described[group]
			assigned := 0
			for _, m := range g.Members {
				if c, ok := m.Assigned.AsConsumer(); ok {
					n := 0
					for _, tp := range c.Topics {
						n += len(tp.Partitions)
					}
					if n > 0 {
						assigned++
					}
				}
			}
			if g.State == "Stable" && assigned == members {
				return
			}
			last = fmt.Sprintf("%s, %d members, %d with partitions", g.State, len(g.Members), assigned)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: group %s never had %d members with partitions (last: %s)", group, members, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
