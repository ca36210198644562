// Package vocab is the binary protocol's wire vocabulary: a table of byte strings indexed by ID
// that works as a compression code for response text. Text from any engine is encoded with a
// byte-level BPE over the table (every byte has an ID, so any text encodes and decodes exactly);
// clients fetch the table once, named by its content hash. The default table is cl100k_base's first
// 65,536 ranks, derived offline by gen.go, so version-1 IDs fit in uint16.
package vocab

import (
	"crypto/sha256"
	_ "embed" // the default table
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Serialized form (docs/protocol.md, "Wire vocabulary"): magic "L0VC", format version byte 1,
// entry count uint32 big-endian, then per entry in ID order a length byte (1-255) and that many
// bytes.
const (
	magic         = "L0VC"
	formatVersion = 1
	headerLen     = len(magic) + 1 + 4
	// MaxLen is the largest number of entries a vocabulary may have (IDs are uint32 on the wire
	// in protocol version 2; version 1 needs Len() ≤ 65,536).
	MaxLen = 1 << 24
	// maxChunk bounds the bytes one BPE run works on; longer runs of text without a space are
	// cut, which costs a little compression and keeps the merge scratch on the stack.
	maxChunk = 64
)

//go:generate go run gen.go

//go:embed cl100k_65536.vocab
var defaultData []byte

var (
	defaultOnce  sync.Once
	defaultVocab *Vocab
)

// Default returns the default wire vocabulary (65,536 entries), parsed once on first use. It is
// safe for concurrent use.
func Default() *Vocab {
	defaultOnce.Do(func() {
		v, err := Parse(defaultData)
		if err != nil {
			panic("vocab: embedded default table: " + err.Error())
		}
		defaultVocab = v
	})
	return defaultVocab
}

// Vocab is an immutable wire vocabulary, safe for concurrent use. Build one with Parse or use
// Default; the zero value is not usable.
type Vocab struct {
	raw    []byte            // the serialized form, served as is
	offs   []uint32          // entry i is raw[offs[i]+1 : offs[i+1]] (offs[i] is its length byte)
	ids    map[string]uint32 // entries longer than shortMax → lowest ID; keys share one string
	short  []shortSlot       // entries of 1 to shortMax bytes, open addressing by packed key
	shift  uint              // 64 - log2(len(short))
	byteID [256]uint32
	hash   string
}

// shortMax is the longest entry kept in the short table: its bytes and length pack into one
// uint64, so a lookup is a multiply, a load and an integer compare. Three in four entries of
// the default table (and most tokens of running text) are that short; a Go map lookup of the
// same key measured about twice as slow (BenchmarkStream100 profile, aeshash and group probes).
const shortMax = 7

// shortSlot is one slot of the short table; key 0 is empty (a packed key has a non-zero length).
type shortSlot struct {
	key uint64
	id  uint32
}

// pack packs a string of 1 to shortMax bytes with its length in the top byte.
func pack(s string) uint64 {
	k := uint64(len(s)) << 56
	for i := 0; i < len(s); i++ {
		k |= uint64(s[i]) << (8 * i)
	}
	return k
}

// lookup returns the lowest ID of the entry with the bytes s.
func (v *Vocab) lookup(s string) (uint32, bool) {
	if len(s) > shortMax {
		id, ok := v.ids[s]
		return id, ok
	}
	k := pack(s)
	mask := uint64(len(v.short) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> v.shift; ; i = (i + 1) & mask {
		switch v.short[i].key {
		case k:
			return v.short[i].id, true
		case 0:
			return 0, false
		}
	}
}

// insertShort adds an entry of 1 to shortMax bytes unless one with its bytes exists.
func (v *Vocab) insertShort(s string, id uint32) {
	k := pack(s)
	mask := uint64(len(v.short) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> v.shift; ; i = (i + 1) & mask {
		switch v.short[i].key {
		case k:
			return
		case 0:
			v.short[i] = shortSlot{key: k, id: id}
			return
		}
	}
}

// Parse reads a vocabulary in its serialized form. It keeps data; the caller must not modify it.
// Every single byte must have an entry, so that any text encodes, and IDs are BPE merge ranks
// (Append merges the pair with the lowest ID first).
func Parse(data []byte) (*Vocab, error) {
	if len(data) < headerLen || string(data[:4]) != magic {
		return nil, errors.New("vocab: not a vocabulary (bad magic)")
	}
	if data[4] != formatVersion {
		return nil, fmt.Errorf("vocab: format version %d, want %d", data[4], formatVersion)
	}
	n := binary.BigEndian.Uint32(data[5:9])
	if n == 0 || n > MaxLen {
		return nil, fmt.Errorf("vocab: entry count %d out of range 1-%d", n, MaxLen)
	}
	if uint64(n)*2 > uint64(len(data)-headerLen) {
		return nil, fmt.Errorf("vocab: entry count %d exceeds the data (%d bytes)", n, len(data))
	}
	// The short table has at least twice as many slots as entries, so probes stay short.
	bits := uint(1)
	for 1<<bits < 2*int(n) {
		bits++
	}
	v := &Vocab{raw: data, offs: make([]uint32, n+1), ids: map[string]uint32{},
		short: make([]shortSlot, 1<<bits), shift: 64 - bits}
	// all is one string holding every entry (with length bytes): map keys are substrings of it,
	// so building the index allocates once for the bytes.
	all := string(data)
	p := headerLen
	for i := range n {
		if p >= len(data) {
			return nil, fmt.Errorf("vocab: entry %d: offset %d: truncated", i, p)
		}
		l := int(data[p])
		if l == 0 {
			return nil, fmt.Errorf("vocab: entry %d: offset %d: empty entry", i, p)
		}
		if p+1+l > len(data) {
			return nil, fmt.Errorf("vocab: entry %d: offset %d: length %d exceeds data", i, p, l)
		}
		v.offs[i] = uint32(p)
		key := all[p+1 : p+1+l]
		if l <= shortMax {
			v.insertShort(key, i)
		} else if _, dup := v.ids[key]; !dup {
			v.ids[key] = i
		}
		p += 1 + l
	}
	if p != len(data) {
		return nil, fmt.Errorf("vocab: offset %d: %d trailing bytes", p, len(data)-p)
	}
	v.offs[n] = uint32(p)
	for b := range 256 {
		id, ok := v.lookup(string([]byte{byte(b)}))
		if !ok {
			return nil, fmt.Errorf("vocab: byte 0x%02x has no entry, so some text cannot encode", b)
		}
		v.byteID[b] = id
	}
	sum := sha256.Sum256(data)
	v.hash = hex.EncodeToString(sum[:8])
	return v, nil
}

// Len is the number of entries; IDs are 0 to Len()-1.
func (v *Vocab) Len() int { return len(v.offs) - 1 }

// Hash is a stable content hash of the serialized form (16 hex digits): equal tables have equal
// hashes, and clients cache the table under it.
func (v *Vocab) Hash() string { return v.hash }

// Bytes returns the bytes of entry id, or nil when id is out of range. The slice is shared: the
// caller must not modify it.
func (v *Vocab) Bytes(id uint32) []byte {
	if int(id) >= v.Len() {
		return nil
	}
	return v.raw[v.offs[id]+1 : v.offs[id+1]]
}

// AppendDecoded appends the bytes of each ID to dst. It reports an error for an ID out of range.
func (v *Vocab) AppendDecoded(dst []byte, ids []uint32) ([]byte, error) {
	for _, id := range ids {
		b := v.Bytes(id)
		if b == nil {
			return dst, fmt.Errorf("vocab: id %d out of range (vocabulary has %d entries)", id, v.Len())
		}
		dst = append(dst, b...)
	}
	return dst, nil
}

// WriteTo writes the serialized form: the bytes served to clients and read by Parse.
func (v *Vocab) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(v.raw)
	return int64(n), err
}

// Size is the length in bytes of the serialized form.
func (v *Vocab) Size() int { return len(v.raw) }
