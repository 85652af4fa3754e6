package aggmerge

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/google/uuid"
)

// Options tune a table. The zero value is usable.
type Options struct {
	// CacheRows bounds the write-through row cache (rows). Default 1<<20.
	CacheRows int
	// SyncWrites makes every Apply durable before it returns. By default
	// writes are unsynced and Sync makes them durable.
	SyncWrites bool
	// MemTableSize is pebble's memtable size in bytes. Default 32 MiB:
	// larger memtables write fewer bytes but make every insert slower.
	MemTableSize uint64
	// BlockCacheSize is pebble's block cache in bytes. Default 64 MiB.
	BlockCacheSize int64
	// AcceptLogLoss opens a table whose log lost writes that a Sync had
	// made durable (see LogLoss) instead of refusing it with ErrCorrupt:
	// for reading what is left, never for writing on.
	AcceptLogLoss bool
	// FS is the file system of the table's files. Default vfs.Default;
	// tests wrap it to inject faults (pebble's vfs/errorfs).
	FS vfs.FS
	// MinFreeBytes is the free space the table keeps in reserve on its file
	// system: below it, Apply refuses with ErrNoSpace and writes nothing,
	// rather than let pebble run out of space (it panics when a write to
	// its WAL or manifest fails). Default twice the memtable size plus
	// 16 MiB (80 MiB), room for a memtable flush and closing cleanly.
	MinFreeBytes uint64
}

func (o Options) withDefaults() Options {
	if o.CacheRows <= 0 {
		o.CacheRows = 1 << 20
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 32 << 20
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = 64 << 20
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 2*o.MemTableSize + 16<<20
	}
	return o
}

// Metadata keys.
const (
	metaSchema = "schema"
	metaID     = "id"
)

// Table is an aggregation-merge table stored in one pebble DB. It is safe
// for concurrent use; writes (Apply, Truncate) are serialized.
type Table struct {
	dir      string
	db       *pebble.DB
	schema   Schema
	id       uuid.UUID
	keyTypes []agg.Type
	valTypes []agg.Type
	funcs    []*agg.Func
	opts     Options
	health   *health
	// logLoss is what checkSynced found, with Options.AcceptLogLoss.
	logLoss error
	// synced guards the recorded synced log ends (syncedFile).
	synced struct {
		sync.Mutex
		ends []uint64
	}
	space spaceGuard

	// scratch is the writers' reusable memory, guarded by writeMu.
	scratch *applyState
	// dirty lists the cache entries whose rows are not stored yet (see
	// rows.go), guarded by writeMu; store runs the goroutine storing them.
	dirty []*cachedRow
	store rowStore

	// writeMu serializes the writers. It is held across the pebble commit on
	// purpose: a write reads old rows and must not interleave with another.
	// Readers never take it.
	writeMu sync.Mutex

	mu struct {
		sync.RWMutex
		closed  bool
		buckets []encoding.BucketState
		cache   rowCache
		writers map[string]Registration // by writer id
		// rowsAt is, per bucket, up to where the stored rows are complete;
		// storeErr is the last background store's failure, which fails
		// Applies until a store succeeds.
		rowsAt   []uint64
		storeErr error
		// appended is closed, and replaced, whenever a log grows.
		appended chan struct{}
	}
}

// Open opens the table in dir, creating it with schema when dir holds none.
// An existing table must have the same schema (ErrSchemaMismatch says what
// differs); a zero Schema opens an existing table with its stored schema.
func Open(dir string, schema Schema, opts Options) (*Table, error) {
	opts = opts.withDefaults()
	given := len(schema.Key) > 0 || len(schema.Values) > 0
	var funcs []*agg.Func
	if given {
		var err error
		if schema, funcs, err = schema.compile(); err != nil {
			return nil, fmt.Errorf("open table %q: %w", dir, err)
		}
	}
	if !given {
		// Opening an existing table must not create one, not even a lock file.
		if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
			return nil, fmt.Errorf("open table %q: %w", dir, ErrNoTable)
		}
	}
	rec, found, err := readSynced(dir)
	if err != nil {
		return nil, fmt.Errorf("open table %q: %w", dir, err)
	}
	wals := walFiles(opts.FS, dir)
	h := &health{}
	po := pebbleOptions(opts, given, h)
	defer po.Cache.Unref()
	db, err := pebble.Open(dir, po)
	if !given && errors.Is(err, pebble.ErrDBDoesNotExist) {
		return nil, fmt.Errorf("open table %q: %w", dir, ErrNoTable)
	}
	t := &Table{dir: dir, db: db, opts: opts, health: h}
	if err != nil {
		return nil, fmt.Errorf("open table %q: %w", dir, t.pebbleErr(err))
	}
	t.mu.appended = make(chan struct{})
	err = t.load(schema, funcs, given)
	if err == nil {
		err = t.checkSynced(rec, found, wals)
	}
	if err == nil {
		err = t.loadRowsAndCache()
	}
	if err == nil {
		err = t.loadWriters()
	}
	if err == nil {
		err = h.err() // what pebble found corrupt meanwhile, in the background
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open table %q: %w", dir, t.pebbleErr(err))
	}
	t.store = rowStore{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go t.storer()
	return t, nil
}

// load reads or creates the metadata and the bucket states.
func (t *Table) load(schema Schema, funcs []*agg.Func, given bool) error {
	raw, closer, err := t.db.Get(encoding.MetaKey(metaSchema))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if !given {
			return ErrNoTable
		}
		return t.create(schema, funcs)
	case err != nil:
		return err
	}
	var stored Schema
	err = json.Unmarshal(raw, &stored)
	_ = closer.Close()
	if err != nil {
		return fmt.Errorf("%w: schema: %v", ErrCorrupt, err)
	}
	stored, sfuncs, err := stored.compile()
	if err != nil {
		return fmt.Errorf("%w: stored schema: %v", ErrCorrupt, err)
	}
	if given {
		if d := diff(stored, schema); len(d) > 0 {
			return fmt.Errorf("%w: %s", ErrSchemaMismatch, strings.Join(d, "; "))
		}
	}
	idb, closer, err := t.db.Get(encoding.MetaKey(metaID))
	if err != nil {
		return fmt.Errorf("%w: table id: %v", ErrCorrupt, err)
	}
	id, err := uuid.FromBytes(idb)
	_ = closer.Close()
	if err != nil {
		return fmt.Errorf("%w: table id: %v", ErrCorrupt, err)
	}
	t.id = id
	t.setSchema(stored, sfuncs)
	return t.loadBuckets()
}

// create writes a new table's metadata.
func (t *Table) create(schema Schema, funcs []*agg.Func) error {
	raw, err := json.Marshal(schema)
	if err != nil {
		return err
	}
	t.id = uuid.New()
	t.setSchema(schema, funcs)
	b := t.db.NewBatch()
	defer b.Close()
	_ = b.Set(encoding.MetaKey(metaSchema), raw, nil)
	_ = b.Set(encoding.MetaKey(metaID), t.id[:], nil)
	t.mu.buckets = make([]encoding.BucketState, schema.Buckets)
	t.synced.ends = make([]uint64, schema.Buckets)
	t.mu.rowsAt = make([]uint64, schema.Buckets)
	for i := range t.mu.buckets {
		_ = b.Set(encoding.BucketKey(uint32(i)), encoding.AppendBucketState(nil, encoding.BucketState{}), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	t.mu.cache = newRowCache(t.opts.CacheRows, true, schema.Buckets)
	return nil
}

func (t *Table) setSchema(s Schema, funcs []*agg.Func) {
	t.schema, t.funcs = s, funcs
	t.keyTypes, t.valTypes = nil, nil
	for _, c := range s.Key {
		t.keyTypes = append(t.keyTypes, c.Type)
	}
	for _, c := range s.Values {
		t.valTypes = append(t.valTypes, c.Type)
	}
}

// loadBuckets reads the bucket states.
func (t *Table) loadBuckets() error {
	t.mu.buckets = make([]encoding.BucketState, t.schema.Buckets)
	for i := range t.mu.buckets {
		raw, closer, err := t.db.Get(encoding.BucketKey(uint32(i)))
		if err = t.pebbleErr(err); err != nil && !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %v", ErrCorrupt, err) // a bucket state is never missing
		}
		if err != nil {
			return fmt.Errorf("bucket %d state: %w", i, err)
		}
		s, err := encoding.DecodeBucketState(raw)
		_ = closer.Close()
		if err != nil {
			return fmt.Errorf("bucket %d state: %w", i, err)
		}
		t.mu.buckets[i] = s
	}
	return nil
}

// loadRowsAndCache replays the log into the stored rows and, when the rows
// fit, fills the row cache so that a miss means "no such row" without a
// pebble read; when they do not, it builds the key filter (keys.go) so
// that a miss of a key it has not means that. A table just created has
// both already.
func (t *Table) loadRowsAndCache() error {
	if t.mu.rowsAt != nil {
		return nil
	}
	var rows uint64
	for _, s := range t.mu.buckets {
		rows += s.Rows
	}
	if err := t.loadRows(); err != nil {
		return fmt.Errorf("recover rows from the log: %w", err)
	}
	complete := rows <= uint64(t.opts.CacheRows)
	t.mu.cache = newRowCache(t.opts.CacheRows, complete, t.schema.Buckets)
	if !complete {
		return t.buildKeys()
	}
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{encoding.PrefixRow}, UpperBound: []byte{encoding.PrefixRow + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		bucket := binary.BigEndian.Uint32(it.Key()[1:5])
		t.mu.cache.add(&cachedRow{key: string(it.Key()[5:]), bucket: bucket, row: append([]byte(nil), it.Value()...)}, 0)
	}
	return it.Close()
}

// ID returns the table identity, a UUID made when the table was created. A
// table recreated under the same directory has a new ID.
func (t *Table) ID() uuid.UUID { return t.id }

// Schema returns the table's canonical schema.
func (t *Table) Schema() Schema { return t.schema }

// Dir returns the table's directory.
func (t *Table) Dir() string { return t.dir }

// Sync makes every write applied so far durable (its log entries; the rows
// they changed are stored soon after, in the background).
func (t *Table) Sync() error {
	_, err := t.SyncEnds()
	return err
}

// SyncEnds is Sync, returning the log end of every bucket it made durable.
// Another writer of the table may append while it syncs, so LogEnds read
// after a Sync can be past what is durable: a checkpoint records these.
func (t *Table) SyncEnds() ([]uint64, error) {
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	ends := t.LogEnds() // before the WAL sync that makes them durable
	if err := t.db.LogData(nil, pebble.Sync); err != nil {
		return nil, fmt.Errorf("sync table %q: %w", t.dir, t.pebbleErr(err))
	}
	if err := t.recordSynced(ends); err != nil {
		return nil, fmt.Errorf("sync table %q: record the synced log ends: %w", t.dir, err)
	}
	t.kickStorer()
	return ends, nil
}

// checkOpen returns ErrClosed after Close, and the corruption pebble found
// (ErrCorrupt) once it found one: a damaged table is neither read nor
// written on.
func (t *Table) checkOpen() error {
	t.mu.RLock()
	closed := t.mu.closed
	t.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return t.health.err()
}

// Close closes the table; it waits for a running write. Reads must not run
// concurrently with Close (as with pebble); after it they return ErrClosed.
// Close is idempotent.
func (t *Table) Close() error {
	t.store.halt.Do(func() {
		close(t.store.stop)
		<-t.store.done
	})
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.RLock()
	closed := t.mu.closed
	t.mu.RUnlock()
	if closed {
		return nil
	}
	// Stored rows make the next Open fast; the log would recover them.
	perr := t.storeRows(true)
	t.mu.Lock()
	t.mu.closed = true
	close(t.mu.appended) // wakes WaitLog
	t.mu.cache = rowCache{}
	t.mu.Unlock()
	if err := errors.Join(perr, t.db.Close()); err != nil {
		return fmt.Errorf("close table %q: %w", t.dir, err)
	}
	return nil
}

// Metrics returns pebble's metrics, for write amplification and sizes.
func (t *Table) Metrics() *pebble.Metrics { return t.db.Metrics() }

// BucketOf returns the bucket of an encoded primary key (see
// encoding.AppendKey): xxhash64 (XXH64, seed 0) of the encoded key, modulo
// the bucket count.
func BucketOf(encodedKey []byte, buckets int) int { return base.BucketOf(encodedKey, buckets) }

// EncodeKey conforms and encodes a full primary key.
func (t *Table) EncodeKey(key []agg.Value) ([]byte, error) {
	return t.appendKey(nil, key, len(t.keyTypes))
}

// Func returns the bound aggregate function of value column i.
func (t *Table) Func(i int) *agg.Func { return t.funcs[i] }

// AppendKey conforms and encodes a full primary key, appending to dst: the
// allocation-free form of EncodeKey.
func (t *Table) AppendKey(dst []byte, key []agg.Value) ([]byte, error) {
	return t.appendKey(dst, key, len(t.keyTypes))
}

// AppendKeyPrefix appends the encoding of the first len(prefix) key
// columns to dst, as AppendKey encodes them: a prefix of the full key's
// encoding (what ScanPrefix scans), decodable by encoding.DecodeKey with
// those columns' types.
func (t *Table) AppendKeyPrefix(dst []byte, prefix []agg.Value) ([]byte, error) {
	if len(prefix) > len(t.keyTypes) {
		return nil, fmt.Errorf("%w: prefix of %d values for a key of %d", ErrInvalid, len(prefix), len(t.keyTypes))
	}
	return t.appendKey(dst, prefix, len(prefix))
}

// Bucket returns the bucket of a primary key.
func (t *Table) Bucket(key []agg.Value) (int, error) {
	k, err := t.EncodeKey(key)
	if err != nil {
		return 0, err
	}
	return BucketOf(k, t.schema.Buckets), nil
}

// appendKey conforms the key values and encodes them; want is the number of
// key columns the caller needs (all, or fewer for a prefix).
func (t *Table) appendKey(dst []byte, key []agg.Value, want int) ([]byte, error) {
	if len(key) != want {
		return nil, fmt.Errorf("%w: %d key values, want %d", ErrInvalid, len(key), want)
	}
	var buf [4]agg.Value
	vals := append(buf[:0], key...)
	for i, v := range vals {
		if v.IsNull() {
			return nil, fmt.Errorf("%w: key column %q is null", ErrInvalid, t.schema.Key[i].Name)
		}
		c, err := agg.Conform(t.keyTypes[i], v)
		if err != nil {
			return nil, fmt.Errorf("%w: key column %q: %w", ErrInvalid, t.schema.Key[i].Name, err)
		}
		vals[i] = c
	}
	return encoding.AppendKey(dst, t.keyTypes, vals)
}
