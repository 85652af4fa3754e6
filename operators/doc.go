// Package operators holds ready-made operators for ebbflow jobs beyond the
// core transformations of package runtime. Connectors live in subpackages
// (operators/kafka).
package operators
