// Package base is the vocabulary every layer of ebbflow shares (pebble's
// internal/base is the model): the kind of a changelog row and the identity
// of a table writer. Each concept is defined here once; the public packages
// name it through type aliases and constants (runtime.RowKind,
// aggmerge.ChangeOp), so users keep the names they know and never import
// this package.
//
// The package imports only the standard library, and every package may
// import it (internal/depcheck's TestImportDirection holds both).
//
// What it defines is stored: row kinds by their strings ("+I", "-U", "+U",
// "-D") in the changelog's headers, writer ids ("<job>/<sink>#<subtask>") in
// tables, log holds and checkpoints. Never change these forms.
package base
