package embedded

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultPartitions is the partition count of topics created on demand when
// Options.Partitions is zero. It matches Apache Kafka's num.partitions default
// so that a job behaves the same against the embedded and a real broker.
const DefaultPartitions = 1

// Options configures an embedded broker. The zero value is a usable default.
type Options struct {
	// Port is the TCP port on 127.0.0.1 to listen on; 0 picks a free one.
	Port int
	// Partitions is the partition count of topics created on demand (by a
	// metadata request that allows it, or by CreateTopics with -1
	// partitions); 0 means DefaultPartitions.
	Partitions int
	// DataDir, when set, keeps topics, records, groups and producer state on
	// disk there, so that a broker started again on the same directory
	// resumes where the last one stopped. Empty keeps everything in memory.
	DataDir string
	// Logger receives the broker's log; nil discards it. Warnings and
	// errors keep their level, the broker's per-request chatter is logged
	// at debug level.
	Logger *slog.Logger
}

// Broker is a running embedded Kafka broker.
type Broker struct {
	cluster *kfake.Cluster
	addrs   []string
}

// Start starts a broker and returns once it is listening.
func Start(opts Options) (*Broker, error) {
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("embedded kafka: port %d out of range", opts.Port)
	}
	if opts.Partitions < 0 {
		return nil, fmt.Errorf("embedded kafka: negative partition count %d", opts.Partitions)
	}
	partitions := opts.Partitions
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(opts.Port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
		kfake.ClusterID("ebbflow-embedded"),
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if opts.Logger != nil {
		kopts = append(kopts, kfake.WithLogger(slogLogger{opts.Logger}))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return &Broker{cluster: c, addrs: c.ListenAddrs()}, nil
}

// Addrs returns the host:port seed addresses to give a Kafka client.
func (b *Broker) Addrs() []string {
	return append([]string(nil), b.addrs...)
}

// Close stops the broker: it stops listening and, with a DataDir, saves its
// state there. It is safe to call more than once.
func (b *Broker) Close() {
	b.cluster.Close()
}

// slogLogger adapts a *slog.Logger to kfake's logger.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	var lvl slog.Level
	switch level {
	case kfake.LogLevelError:
		lvl = slog.LevelError
	case kfake.LogLevelWarn:
		lvl = slog.LevelWarn
	case kfake.LogLevelInfo, kfake.LogLevelDebug:
		lvl = slog.LevelDebug
	default:
		return
	}
	ctx := context.Background()
	if !s.l.Enabled(ctx, lvl) {
		return
	}
	s.l.Log(ctx, lvl, fmt.Sprintf(format, args...), "component", "embedded-kafka")
}
