// Package watermark is the event-time leaf of ebbflow: the representation of
// event time and watermarks, and the two pure state machines that compute
// them, with no IO, clock or goroutine of their own.
//
//   - Splits turns the event times a source subtask reads from each of its
//     splits (Kafka partitions) into the subtask's watermark: per split the
//     largest event time seen minus a bound on out-of-orderness, the minimum
//     over the splits that are not idle, idle splits (no record for a
//     timeout) excluded.
//   - Valve combines the watermarks and idle statuses arriving on the input
//     channels of a subtask into the subtask's watermark: the minimum over
//     the active channels, forwarded only when it advances.
//
// Windows and Sessions assign event times to windows: tumbling or hopping
// (fixed), and session windows of one key, which merge as records bridge
// them.
//
// Event time is an int64 of nanoseconds since the Unix epoch (UTC). Min is
// "no watermark yet", Max "end of event time": a source that ended emits it,
// so every timer fires.
//
// Invariants (pinned by the scripted cases in testdata/):
//   - the output of a Valve never decreases, whatever its inputs do: a
//     channel's watermark below what it delivered before is ignored, and a
//     channel that becomes active again behind the output does not count
//     until it caught up;
//   - an idle channel never holds the output back; when every channel is
//     idle the output is the largest watermark any channel delivered, and
//     the output itself is idle;
//   - a watermark W promises that the records after it on the same channel
//     have event times after W; a record at or before it is late.
package watermark
