package changelogfmt

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// UpsertJSON is the Kafka Streams, ksqlDB and Flink upsert-kafka
// convention: key = the primary key as a JSON object, value = the full row
// (key and value columns) as a JSON object, a delete is a tombstone (null
// value). Updates carry only the new row: the -U half of an update is not
// written. The topic is compactable.
//
// Decoded, each record gives a kafka.ChangeUpsert, or a kafka.ChangeDelete
// without Before; a kafka.Normalizer turns them into exact inserts,
// updates and deletes.
var UpsertJSON Format = upsertJSON{}

type upsertJSON struct{}

func (upsertJSON) Name() string { return UpsertJSONName }

func (upsertJSON) Envelope() bool { return false }

func (upsertJSON) Append(dst []kgo.Record, buf []byte, e *Entry) ([]kgo.Record, []byte) {
	r := kgo.Record{Key: e.Key}
	if e.Op != runtime.RowDelete {
		r.Value = e.After
	}
	return append(dst, r), buf
}

func (upsertJSON) Decoder() kafka.Format[kafka.Change] {
	return func() kafka.Decoder[kafka.Change] {
		d := &kafka.RowDecoder{}
		return func(r *kgo.Record) (kafka.Change, error) {
			c, err := decodeKey(d, r)
			if err != nil {
				return c, err
			}
			c.Record = r
			if r.Value == nil {
				c.Op = kafka.ChangeDelete
				return c, nil
			}
			if c.After, err = d.Decode(r.Value); err != nil {
				return c, fmt.Errorf("upsert-json value: %w", err)
			}
			c.Op = kafka.ChangeUpsert
			return c, nil
		}
	}
}
