package kafka

import (
	"encoding/json"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
)

// Decoder turns a fetched record into the source's record type. An error
// sends the record to the source's error policy. The record, its key, value
// and headers are not reused by the client: a decoded value may keep them.
type Decoder[T any] func(r *kgo.Record) (T, error)

// Format makes the decoder of one source subtask, so a decoder may keep
// buffers (a JSON parser) without locking.
type Format[T any] func() Decoder[T]

// Raw passes record values through undecoded.
func Raw() Format[[]byte] {
	return func() Decoder[[]byte] {
		return func(r *kgo.Record) ([]byte, error) { return r.Value, nil }
	}
}

// JSON decodes each value into a T with encoding/json (about 0.6M records/s
// per core for small structs; JSONWith is several times faster). Like every
// JSON format of the source, it refuses a value that is not valid UTF-8 or
// nests deeper than 64 levels.
func JSON[T any]() Format[T] {
	return func() Decoder[T] {
		return func(r *kgo.Record) (T, error) {
			var v T
			if err := checkJSON(r.Value); err != nil {
				return v, err
			}
			err := json.Unmarshal(r.Value, &v)
			return v, err
		}
	}
}

// JSONWith parses each value with a reused fastjson parser and builds the T
// with build. The parsed value is valid only during the call: copy strings
// out of it (string(v.GetStringBytes(...)) does). A value that is not valid
// UTF-8 or nests deeper than 64 levels is a decode error.
func JSONWith[T any](build func(v *fastjson.Value) (T, error)) Format[T] {
	return func() Decoder[T] {
		var p fastjson.Parser
		return func(r *kgo.Record) (T, error) {
			var zero T
			if err := checkJSON(r.Value); err != nil {
				return zero, err
			}
			v, err := p.ParseBytes(r.Value)
			if err != nil {
				return zero, err
			}
			return build(v)
		}
	}
}

// Record is a decoded value with the record's metadata.
type Record[T any] struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Headers   []kgo.RecordHeader
	Value     T
}

// WithMetadata wraps f so that the pipeline also sees each record's topic,
// partition, offset, timestamp, key and headers.
func WithMetadata[T any](f Format[T]) Format[Record[T]] {
	return func() Decoder[Record[T]] {
		dec := f()
		return func(r *kgo.Record) (Record[T], error) {
			v, err := dec(r)
			if err != nil {
				return Record[T]{}, err
			}
			return Record[T]{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
				Key: r.Key, Headers: r.Headers, Value: v}, nil
		}
	}
}
