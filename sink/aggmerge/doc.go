// Package aggmerge is the aggregation-merge table: primary-key rows whose
// columns aggregate, split into buckets, each bucket with a changelog of
// +I/-U/+U/-D entries carrying full before- and after-images. It also holds
// the exactly-once writer that undoes its writes past its last checkpoint,
// and the changelog exporter.
package aggmerge
