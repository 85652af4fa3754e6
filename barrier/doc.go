// Package barrier is the vocabulary leaf of ebbflow: checkpoint ids, the
// barrier and cancel events that travel in-band with the data, and the
// alignment state machine that decides, for a subtask with several inputs,
// when to block an input, when to snapshot and when to abort.
//
// The package imports only the standard library. The Aligner performs no IO:
// it takes events ("barrier 7 arrived on input 2") and returns the actions the
// task goroutine must carry out (block input 2, snapshot and forward barrier 7,
// resume all inputs, abort checkpoint 6). Its behaviour is pinned by the
// scripted cases in testdata/.
//
// Invariants:
//   - checkpoint ids only grow; an event for an id at or below the newest id
//     already decided is ignored;
//   - a barrier with a newer id subsumes (aborts) a pending alignment;
//   - in exactly-once mode an input that delivered barrier N delivers nothing
//     more until N is snapshotted or aborted, so a snapshot holds everything
//     before N and nothing after it;
//   - an input that ended counts as aligned for every later barrier;
//   - the aligner reads no clock: the task owns the alignment timer and
//     reports its expiry, which aborts the pending alignment (naming the
//     inputs still late) unless its checkpoint is the initial or a final
//     one.
package barrier
