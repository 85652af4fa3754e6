// Package operators holds ready-made operators for ebbflow jobs beyond the
// core transformations of package runtime: a sequence source, an
// exactly-once collecting sink, Dedupe and SessionWindows (event time,
// keyed state and timers). Connectors live in subpackages
// (operators/kafka).
package operators
