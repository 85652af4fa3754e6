package state

import (
	"errors"
	"fmt"

	"github.com/ebbflow/ebbflow/barrier"
)

// DefaultCacheEntries bounds the write-back cache of a Keyed unless set.
const DefaultCacheEntries = 1 << 20

// ErrNotOwned is returned for a key whose group is outside the subtask's
// range: the records were partitioned with another function than KeyGroupOf.
var ErrNotOwned = errors.New("state: key group not owned by this subtask")

// KeyedConfig configures the keyed state of one operator subtask.
type KeyedConfig struct {
	Backend   KeyedBackend
	KeyGroups KeyGroupRange
	// MaxParallelism is the job's number of key groups (0: DefaultMaxParallelism).
	MaxParallelism int
	// CacheEntries bounds the cached entries of all states together (0:
	// DefaultCacheEntries). A map state's key counts one plus its user keys.
	CacheEntries int
}

// Keyed is the keyed state of one operator subtask: the typed states
// registered on it share one backend and one write-back cache. Reads hit the
// cache first, then the backend; writes only mark cache entries dirty. Flush
// writes every dirty entry in one Apply; the runtime calls it (through
// Capture) at each barrier. When the cache is full, dirty entries are flushed
// early and about half of the entries are evicted: writing to the backend
// before a barrier is harmless because a restore uses the checkpoint's copy.
//
// A Keyed is used by the task's goroutine only.
type Keyed struct {
	backend    KeyedBackend
	groups     KeyGroupRange
	maxPar     int
	maxEntries int
	entries    int // cached entries, all states together
	states     []cachedState
	names      map[string]bool
	batch      WriteBatch
	buf        []byte // backs the keys and values of batch until Apply
	scratch    []byte

	// A barrier's flush is applied and captured on the persist goroutine
	// (Capture). inflight is closed when it is done; until then no other
	// Apply runs and nothing is evicted, so every key it writes stays
	// cached (or, in a complete cache, is known to have no value: see
	// Value.LoadAll) and reads never see the backend behind the cache. spare* hold
	// the other batch and buffer, swapped at each Capture.
	inflight   chan struct{}
	applyErr   error // set before inflight closes: the cache is ahead of the backend for good
	spareBatch WriteBatch
	spareBuf   []byte
}

// cachedState is what Keyed needs of each registered state.
type cachedState interface {
	// appendDirty adds a write for every dirty entry to kd.batch.
	appendDirty(kd *Keyed) error
	// markClean forgets the dirty marks after a successful Apply.
	markClean()
	// evict drops up to n clean entries and returns how many entries it freed.
	evict(n int) int
}

// NewKeyed returns the keyed state of a subtask over cfg.Backend.
func NewKeyed(cfg KeyedConfig) *Keyed {
	if cfg.MaxParallelism <= 0 {
		cfg.MaxParallelism = DefaultMaxParallelism
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = DefaultCacheEntries
	}
	return &Keyed{
		backend:    cfg.Backend,
		groups:     cfg.KeyGroups,
		maxPar:     cfg.MaxParallelism,
		maxEntries: cfg.CacheEntries,
		names:      map[string]bool{},
	}
}

// KeyGroups returns the range of groups this subtask owns.
func (kd *Keyed) KeyGroups() KeyGroupRange { return kd.groups }

// CachedEntries returns the number of entries in the cache.
func (kd *Keyed) CachedEntries() int { return kd.entries }

// Flush writes every dirty entry of every state to the backend in one Apply.
func (kd *Keyed) Flush() error {
	if err := kd.wait(); err != nil {
		return err
	}
	kd.batch.Reset()
	kd.buf = kd.buf[:0]
	for _, s := range kd.states {
		if err := s.appendDirty(kd); err != nil {
			return err
		}
	}
	if len(kd.batch.Ops) == 0 {
		return nil
	}
	if err := kd.backend.Apply(&kd.batch); err != nil {
		return fmt.Errorf("flush keyed state: %w", err)
	}
	for _, s := range kd.states {
		s.markClean()
	}
	kd.batch.Reset()
	return nil
}

// Capture takes the state for checkpoint id: synchronously it only copies
// the dirty entries of the cache into a batch (they become clean); persist
// applies that batch to the backend, captures the backend into dir and
// persists it, on the caller's goroutine, while the task goes on. The next
// Flush or Capture waits for it. If the apply fails, the cache holds writes
// the backend lacks: every later Flush and Capture fails, so the task fails
// and restores from the last checkpoint.
func (kd *Keyed) Capture(id barrier.CheckpointID, dir string) (persist func() ([]File, error), err error) {
	if err := kd.wait(); err != nil {
		return nil, err
	}
	kd.batch.Reset()
	kd.buf = kd.buf[:0]
	for _, s := range kd.states {
		if err := s.appendDirty(kd); err != nil {
			return nil, err
		}
	}
	for _, s := range kd.states {
		s.markClean()
	}
	batch := kd.batch
	kd.batch, kd.spareBatch = kd.spareBatch, batch
	kd.buf, kd.spareBuf = kd.spareBuf, kd.buf
	done := make(chan struct{})
	kd.inflight = done
	return func() ([]File, error) {
		defer close(done)
		if len(batch.Ops) > 0 {
			if err := kd.backend.Apply(&batch); err != nil {
				kd.applyErr = fmt.Errorf("flush keyed state for checkpoint %d: %w", id, err)
				return nil, kd.applyErr
			}
		}
		persist, err := kd.backend.Capture(id, dir)
		if err != nil {
			return nil, err
		}
		return persist()
	}, nil
}

// wait waits for the persist of the last Capture to have applied its batch.
func (kd *Keyed) wait() error {
	if kd.inflight != nil {
		<-kd.inflight
		kd.inflight = nil
	}
	return kd.applyErr
}

// register records a state name; names identify states across restores.
func (kd *Keyed) register(name string, s cachedState) {
	if name == "" || len(name) > 255 {
		panic(fmt.Sprintf("state: state name %q must have 1 to 255 bytes", name))
	}
	if kd.names[name] {
		panic(fmt.Sprintf("state: state %q registered twice", name))
	}
	kd.names[name] = true
	kd.states = append(kd.states, s)
}

// reserve makes room for n new cache entries and counts them. When the cache
// would overflow it flushes and evicts, which may drop any clean entry:
// callers must look their entries up again after it.
func (kd *Keyed) reserve(n int) (evicted bool, err error) {
	if kd.entries+n > kd.maxEntries && kd.entries > 0 {
		if err := kd.Flush(); err != nil {
			return false, err
		}
		target := kd.maxEntries / 2
		for _, s := range kd.states {
			if kd.entries <= target {
				break
			}
			kd.entries -= s.evict(kd.entries - target)
		}
		evicted = true
	}
	kd.entries += n
	return evicted, nil
}

// encodeKey encodes k into kd.scratch and returns the bytes and key group,
// checking that the group is owned.
func encodeKey[K any](kd *Keyed, c Codec[K], k K) ([]byte, int, error) {
	kd.scratch = c.Append(kd.scratch[:0], k)
	g := KeyGroupOf(kd.scratch, kd.maxPar)
	if !kd.groups.Contains(g) {
		return nil, 0, fmt.Errorf("key %v in group %d, own [%d, %d): %w", k, g, kd.groups.Start, kd.groups.End, ErrNotOwned)
	}
	return kd.scratch, g, nil
}

// appendOp appends to kd.batch a put of v (or a delete when v is nil) of
// userKey in state name, group g. The key and value bytes live in kd.buf
// until the next Flush: a growth of buf copies, it never overwrites them.
func (kd *Keyed) appendOp(g int, name string, userKey []byte, put bool, v []byte) {
	start := len(kd.buf)
	kd.buf = AppendBackendKey(kd.buf, g, name, userKey)
	key := kd.buf[start:len(kd.buf):len(kd.buf)]
	if !put {
		kd.batch.Del(key)
		return
	}
	kd.batch.Put(key, v)
}
