// Package examples holds runnable ebbflow programs and job files; each one is
// exercised by a test.
package examples
