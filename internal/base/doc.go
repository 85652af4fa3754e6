// Package base is the vocabulary every layer of ebbflow shares (pebble's
// internal/base is the model): the kind of a changelog row, the identity of
// a table writer, the bucket of a primary key and the subtask that owns a
// bucket, and the stable hash they are drawn from. Each concept is defined
// here once; the public packages name it through type aliases, constants
// and one-line functions (runtime.RowKind, aggmerge.ChangeOp,
// aggmerge.BucketOf, writer.Owner), so users keep the names they know and
// never import this package.
//
// The package imports only the standard library and the hash of buckets
// (github.com/cespare/xxhash), and every package may
// import it (internal/depcheck's TestImportDirection holds both).
//
// What it defines is stored: row kinds by their strings ("+I", "-U", "+U",
// "-D") in the changelog's headers, writer ids ("<job>/<sink>#<subtask>") in
// tables, log holds and checkpoints, buckets (Hash64 of the encoded key
// mod the bucket count) in every table's layout. Never change these forms.
package base
