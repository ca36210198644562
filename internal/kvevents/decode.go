// Package kvevents reads the KV-cache events an inference engine publishes — vLLM's
// KVEventBatch over ZeroMQ — so that layer0's prefix index can follow exactly what each replica
// holds. It has the decoder of the msgpack payload (Decoder), the publisher side the embedded
// simulator uses to publish the same events (Encoder, Publisher), and the subscriber that keeps
// one replica's index in step with its engine across restarts (Subscriber), reading the ZeroMQ
// protocol itself so that every frame is bounded before it is read (zmtp.go).
//
// The wire format, as vLLM's publisher sends it: a ZeroMQ multipart message [topic, sequence,
// payload], the sequence an 8-byte big-endian integer that counts up by one per message from 0
// when the publisher starts, the payload a msgpack KVEventBatch encoded as an array
// [ts, events, data_parallel_rank?]. Each event is a tagged struct: older engines encode it as
// an array whose first element is its tag ("BlockStored", "BlockRemoved", "AllBlocksCleared")
// and the fields in order; newer ones as a map with the tag under "type" and the fields by
// name. Both are read. The fields read are
//
//	BlockStored:  block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, …, group_idx
//	BlockRemoved: block_hashes, medium, group_idx
//
// and a block hash is an integer (signed or unsigned, up to 64 bits) or a byte string (the
// engine's sha256 digest), depending on the engine's version; a byte string is folded to 64
// bits (Hash), which the index only compares.
package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Hash is an engine's block hash as layer0 keeps it: an integer hash as is, a byte-string
// hash folded to 64 bits (FNV-1a, then a mixer).
type Hash uint64

// Kind is an event's type.
type Kind uint8

// The event kinds.
const (
	// Unknown is an event of a type this decoder does not know; it is skipped.
	Unknown Kind = iota
	// BlockStored: full blocks were added to the cache, each chained on the one before.
	BlockStored
	// BlockRemoved: blocks were evicted.
	BlockRemoved
	// AllBlocksCleared: the cache was emptied.
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}

// Event is one decoded event. Slices are owned by the Batch and reused by the next Decode.
type Event struct {
	Kind Kind
	// Hashes are the blocks stored or removed, in order (each stored block chained on the one
	// before, the first on Parent).
	Hashes []Hash
	// Parent is the block the first stored block chains on; HasParent is false for a block at
	// the start of a prompt.
	Parent    Hash
	HasParent bool
	// Tokens are the token ids of the stored blocks, BlockSize per block.
	Tokens    []uint32
	BlockSize int
	// LoRA is set when the blocks belong to a LoRA adapter (lora_id or lora_name set).
	LoRA bool
	// Medium is where the blocks live ("GPU", "CPU", …); "" when the engine does not say.
	Medium string
	// Group is the KV-cache group of a hybrid model; 0 when the engine does not say.
	Group int
}

// Batch is one decoded message payload.
type Batch struct {
	// TS is the engine's timestamp of the batch, in seconds since the epoch.
	TS float64
	// Events are the batch's events, in order; valid until the next Decode into the batch.
	Events []Event
	// Rank is the data-parallel rank of the engine that published it; -1 when not given.
	Rank int
}

// Limits on what one payload may hold; beyond them the payload is refused.
const (
	// maxDepth bounds the nesting of skipped values.
	maxDepth = 32
	// maxHashBytes bounds a byte-string block hash.
	maxHashBytes = 128
	// maxString bounds a tag, field name or medium.
	maxString = 64
)

// ErrFormat is wrapped by every error of a payload that is not a KVEventBatch.
var ErrFormat = errors.New("kvevents: not a KV event batch")

// Decoder decodes payloads. Its buffers are reused: decoding a batch into the same Batch
// allocates nothing once the buffers are large enough. A Decoder is not safe for concurrent
// use.
type Decoder struct {
	r   bytes.Reader
	d   *msgpack.Decoder
	str [maxString]byte
	hb  [maxHashBytes]byte
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	x := &Decoder{}
	x.d = msgpack.NewDecoder(&x.r)
	return x
}

// Decode decodes the payload p into b. Allocation is bounded by p's length: every length read
// is checked against the bytes left before anything is allocated for it.
func (x *Decoder) Decode(p []byte, b *Batch) error {
	x.r.Reset(p)
	x.d.Reset(&x.r)
	if err := x.batch(b); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return nil
}

func (x *Decoder) batch(b *Batch) error {
	n, err := x.arrayLen()
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if n < 2 {
		return fmt.Errorf("batch: %d fields, want [ts, events, …]", n)
	}
	if b.TS, err = x.d.DecodeFloat64(); err != nil {
		return fmt.Errorf("batch ts: %w", err)
	}
	ne, err := x.arrayLen()
	if err != nil {
		return fmt.Errorf("batch events: %w", err)
	}
	if cap(b.Events) < ne {
		b.Events = append(b.Events[:cap(b.Events)], make([]Event, ne-cap(b.Events))...)
	}
	b.Events = b.Events[:ne]
	for i := range b.Events {
		if err := x.event(&b.Events[i]); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	b.Rank = -1
	if n > 2 {
		if isNil, err := x.nil(); err != nil {
			return err
		} else if !isNil {
			r, err := x.d.DecodeInt64()
			if err != nil {
				return fmt.Errorf("batch data_parallel_rank: %w", err)
			}
			if r < 0 || r > math.MaxInt32 {
				return fmt.Errorf("batch data_parallel_rank %d out of range", r)
			}
			b.Rank = int(r)
		}
	}
	for i := 3; i < n; i++ {
		if err := x.skip(0); err != nil {
			return err
		}
	}
	return nil
}

// The fields of the events, by position after the tag in the array form.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func (x *Decoder) event(e *Event) error {
	*e = Event{Hashes: e.Hashes[:0], Tokens: e.Tokens[:0]}
	c, err := x.d.PeekCode()
	if err != nil {
		return err
	}
	if isMap(c) {
		return x.eventMap(e)
	}
	n, err := x.arrayLen()
	if err != nil {
		return err
	}
	if n < 1 {
		return errors.New("empty event")
	}
	tag, err := x.string()
	if err != nil {
		return fmt.Errorf("event tag: %w", err)
	}
	e.Kind = kindOf(tag)
	var fields []string
	switch e.Kind {
	case BlockStored:
		fields = storedFields
	case BlockRemoved:
		fields = removedFields
	}
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(fields) {
			name = fields[i-1]
		}
		if err := x.field(e, name); err != nil {
			return err
		}
	}
	return nil
}

func (x *Decoder) eventMap(e *Event) error {
	n, err := x.mapLen()
	if err != nil {
		return err
	}
	// The tag may come after fields: fields are read into e whatever the kind, and the kind
	// is set when the tag is read.
	for i := 0; i < n; i++ {
		key, err := x.string()
		if err != nil {
			return fmt.Errorf("event field name: %w", err)
		}
		if key == "type" {
			tag, err := x.string()
			if err != nil {
				return fmt.Errorf("event tag: %w", err)
			}
			e.Kind = kindOf(tag)
			continue
		}
		if err := x.field(e, key); err != nil {
			return err
		}
	}
	return nil
}

// kindOf returns the Kind whose tag (String) is tag, or Unknown.
func kindOf(tag string) Kind {
	for k := BlockStored; k <= AllBlocksCleared; k++ {
		if tag == k.String() {
			return k
		}
	}
	return Unknown
}

// field decodes the field name into e; a field not read is skipped.
func (x *Decoder) field(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		err = x.hashes(e)
	case "parent_block_hash":
		var isNil bool
		if isNil, err = x.nil(); err == nil && !isNil {
			e.Parent, err = x.hash()
			e.HasParent = err == nil
		}
	case "token_ids":
		err = x.tokens(e)
	case "block_size":
		var v int64
		if v, err = x.d.DecodeInt64(); err == nil {
			if v < 1 || v > 1<<20 {
				err = fmt.Errorf("block_size %d out of range", v)
			}
			e.BlockSize = int(v)
		}
	case "lora_id", "lora_name":
		var isNil bool
		if isNil, err = x.nil(); err == nil && !isNil {
			e.LoRA = true
			err = x.skip(0)
		}
	case "medium":
		var isNil bool
		if isNil, err = x.nil(); err == nil && !isNil {
			e.Medium, err = x.string()
		}
	case "group_idx":
		var isNil bool
		if isNil, err = x.nil(); err == nil && !isNil {
			var v int64
			if v, err = x.d.DecodeInt64(); err == nil {
				if v < 0 || v > math.MaxInt32 {
					err = fmt.Errorf("group_idx %d out of range", v)
				}
				e.Group = int(v)
			}
		}
	default:
		err = x.skip(0)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (x *Decoder) hashes(e *Event) error {
	n, err := x.arrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		h, err := x.hash()
		if err != nil {
			return err
		}
		e.Hashes = append(e.Hashes, h)
	}
	return nil
}

func (x *Decoder) tokens(e *Event) error {
	n, err := x.arrayLen()
	if err != nil {
		return err
	}
	e.Tokens = slices.Grow(e.Tokens, n) // amortized: a field repeated many times stays linear
	for i := 0; i < n; i++ {
		v, err := x.d.DecodeInt64()
		if err != nil {
			return err
		}
		if v < 0 || v > math.MaxUint32 {
			return fmt.Errorf("token id %d out of range", v)
		}
		e.Tokens = append(e.Tokens, uint32(v))
	}
	return nil
}

// hash decodes a block hash: an integer, or a byte string folded to 64 bits.
func (x *Decoder) hash() (Hash, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		n, err := x.d.DecodeBytesLen()
		if err != nil {
			return 0, err
		}
		if n < 0 || n > maxHashBytes {
			return 0, fmt.Errorf("block hash of %d bytes", n)
		}
		buf := x.hb[:n]
		if err := x.d.ReadFull(buf); err != nil {
			return 0, err
		}
		return HashBytes(buf), nil
	}
	if c == msgpcode.Uint64 {
		v, err := x.d.DecodeUint64()
		return Hash(v), err
	}
	v, err := x.d.DecodeInt64()
	return Hash(uint64(v)), err
}

// HashBytes folds a byte-string block hash to a Hash: FNV-1a over the bytes, then
// splitmix64's finalizer.
func HashBytes(b []byte) Hash {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return Hash(h ^ h>>31)
}

// string decodes a short string (a tag, a field name, a medium) without keeping the bytes.
func (x *Decoder) string() (string, error) {
	n, err := x.d.DecodeBytesLen()
	if err != nil {
		return "", err
	}
	if n < 0 || n > maxString {
		return "", fmt.Errorf("string of %d bytes", n)
	}
	buf := x.str[:n]
	if err := x.d.ReadFull(buf); err != nil {
		return "", err
	}
	return internString(buf), nil
}

// internString returns the known strings without allocating.
func internString(b []byte) string {
	for _, s := range known {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

var known = []string{"BlockStored", "BlockRemoved", "AllBlocksCleared", "type", "GPU", "CPU",
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
	"extra_keys", "group_idx"}

// nil consumes a nil and reports true, or reports false and leaves the value.
func (x *Decoder) nil() (bool, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, x.d.DecodeNil()
}

// arrayLen reads an array header and checks that its elements (one byte each at least) fit in
// the bytes left. A nil array is empty.
func (x *Decoder) arrayLen() (int, error) {
	n, err := x.d.DecodeArrayLen()
	return x.fits(n, err, 1, "array of %d elements in %d bytes")
}

// mapLen is arrayLen for a map (two bytes an entry at least).
func (x *Decoder) mapLen() (int, error) {
	n, err := x.d.DecodeMapLen()
	return x.fits(n, err, 2, "map of %d entries in %d bytes")
}

// fits checks the header just read, of n entries (err its error; nil when n < 0, read as
// none) of at least size bytes each, against the bytes left; format spells the error of one
// that cannot fit, given n and the bytes left.
func (x *Decoder) fits(n int, err error, size int, format string) (int, error) {
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, nil
	}
	if size*n > x.r.Len() {
		return 0, fmt.Errorf(format, n, x.r.Len())
	}
	return n, nil
}

// isMap reports whether the code c starts a map.
func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

// skip skips one value, its nesting bounded by maxDepth.
func (x *Decoder) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("values nested too deep")
	}
	c, err := x.d.PeekCode()
	if err != nil {
		return err
	}
	var n int // the values nested in it
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = x.arrayLen()
	case isMap(c):
		n, err = x.mapLen()
		n *= 2
	default:
		return x.d.Skip() // a scalar, string, binary or extension: no nesting
	}
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := x.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
