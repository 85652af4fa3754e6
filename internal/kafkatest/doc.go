// Package kafkatest gives tests a Kafka broker and a few helpers around it.
//
// Brokers returns the real brokers named by the environment variable
// EBBFLOW_KAFKA_BROKERS (CI starts an Apache Kafka broker with .ci/kafka.sh
// and sets it), and otherwise starts an embedded broker for the test. So every
// Kafka test runs against kfake locally and against real Kafka in CI; a test
// that only makes sense against real Kafka calls RequireReal.
//
// Tests share a real broker, so they must not share topics: NewTopic makes a
// topic with a name unique to the test and deletes it at cleanup.
//
// Every helper fails the test (t.Fatal) on error and bounds its waiting with
// Timeout, so a broken broker fails a test instead of hanging it.
package kafkatest
