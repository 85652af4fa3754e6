package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// health follows a subtask's client through franz-go hooks: the client
// retries failed connections and requests with backoff on its own, so the
// source never fails on a broker outage; it reports it here, in the fetch
// error counter and in a rate-limited log instead.
type health struct {
	lastOK, lastErr atomic.Int64 // Unix nanoseconds
	msg             atomic.Pointer[string]
	fetchErrors     prometheus.Counter
	log             *limitedLog
}

func (h *health) ok() { h.lastOK.Store(time.Now().UnixNano()) }

func (h *health) fail(what string, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return // closing
	}
	msg := fmt.Sprintf("%s: %v", what, err)
	h.msg.Store(&msg)
	h.lastErr.Store(time.Now().UnixNano())
	h.fetchErrors.Inc()
	h.log.warn("kafka source: retrying", "error", msg)
}

// status is false while the last broker interaction failed.
func (h *health) status() (bool, string) {
	lastErr := h.lastErr.Load()
	if lastErr == 0 || h.lastOK.Load() > lastErr {
		return true, "ok"
	}
	return false, fmt.Sprintf("failing since %s: %s", time.Unix(0, lastErr).UTC().Format(time.RFC3339), *h.msg.Load())
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h *health) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.fail(fmt.Sprintf("connect to broker %s", net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))), err)
		return
	}
	h.ok()
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (h *health) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if err := e2e.Err(); err != nil {
		h.fail(fmt.Sprintf("%s request to broker %s", kmsg.NameForKey(key), net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))), err)
		return
	}
	h.ok()
}

// limitedLog logs a warning at most once per interval, saying how many it
// held back.
type limitedLog struct {
	logger *slog.Logger
	every  time.Duration
	mu     struct {
		sync.Mutex
		last       time.Time
		suppressed int
	}
}

func newLimitedLog(l *slog.Logger, every time.Duration) *limitedLog {
	return &limitedLog{logger: l, every: every}
}

func (l *limitedLog) warn(msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.mu.last) < l.every {
		l.mu.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.mu.suppressed
	l.mu.last, l.mu.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	l.logger.Warn(msg, args...)
}
