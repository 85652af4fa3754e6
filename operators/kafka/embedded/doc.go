// Package embedded runs an in-process Kafka broker (franz-go's kfake) on a
// loopback port. The runner uses it when no brokers are configured, so a
// quickstart needs nothing installed; tests use it wherever no real broker
// is given.
//
// The broker speaks the Kafka protocol to any client: topics are created on
// demand (when the client's metadata request allows it, as with Apache
// Kafka's auto.create.topics.enable), and transactions and read_committed
// work, so exactly-once producers and consumers behave as against a real
// broker. It is one broker, listening on 127.0.0.1 only.
//
// Invariants: a Broker returned by Start is listening; Close is idempotent,
// frees the port and (with a DataDir) has saved the broker's state before it
// returns. kfake offers no way to wait for its own goroutines: they notice
// Close and end shortly after. Without Options.DataDir every record lives in
// memory and is gone after Close.
package embedded
