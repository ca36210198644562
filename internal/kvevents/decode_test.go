package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// readHex reads a testdata fixture: hex bytes, "#" comments to the end of a line.
func readHex(t testing.TB, name string) []byte {
	t.Helper()
	src, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func TestDecodeArrayFormIntHashes(t *testing.T) {
	var b Batch
	if err := NewDecoder().Decode(readHex(t, "array_int.hex"), &b); err != nil {
		t.Fatal(err)
	}
	if b.TS != 1764612000.25 || b.Rank != -1 || len(b.Events) != 3 {
		t.Fatalf("batch ts %v rank %d events %d", b.TS, b.Rank, len(b.Events))
	}
	s := b.Events[0]
	neg := Hash(0xffffffffffffff85) // int64 -123
	if s.Kind != BlockStored || !slices.Equal(s.Hashes, []Hash{0x8a3f5c11029e77d4, neg}) || s.HasParent ||
		!slices.Equal(s.Tokens, []uint32{1, 300, 100000, 127, 128, 0, 16, 5}) || s.BlockSize != 4 ||
		s.LoRA || s.Medium != "GPU" || s.Group != 0 {
		t.Fatalf("BlockStored = %+v", s)
	}
	r := b.Events[1]
	if r.Kind != BlockRemoved || !slices.Equal(r.Hashes, []Hash{neg}) || r.Medium != "" {
		t.Fatalf("BlockRemoved = %+v", r)
	}
	if b.Events[2].Kind != AllBlocksCleared {
		t.Fatalf("third event = %+v", b.Events[2])
	}
}

func TestDecodeMapFormByteHashes(t *testing.T) {
	var b Batch
	if err := NewDecoder().Decode(readHex(t, "map_bytes.hex"), &b); err != nil {
		t.Fatal(err)
	}
	if b.Rank != 7 || len(b.Events) != 2 {
		t.Fatalf("batch rank %d events %d", b.Rank, len(b.Events))
	}
	seq := func(from byte) []byte {
		s := make([]byte, 32)
		for i := range s {
			s[i] = from + byte(i)
		}
		return s
	}
	h1, h2 := HashBytes(seq(0x20)), HashBytes(seq(0x40))
	parent := HashBytes(bytes.Repeat([]byte{0xee}, 32))
	s := b.Events[0]
	if s.Kind != BlockStored || !slices.Equal(s.Hashes, []Hash{h1, h2}) || !s.HasParent || s.Parent != parent ||
		!slices.Equal(s.Tokens, []uint32{10, 11, 12, 13}) || s.BlockSize != 2 || s.LoRA || s.Medium != "GPU" {
		t.Fatalf("BlockStored = %+v", s)
	}
	r := b.Events[1]
	if r.Kind != BlockRemoved || !slices.Equal(r.Hashes, []Hash{h1}) || r.Medium != "CPU" || r.Group != 0 {
		t.Fatalf("BlockRemoved = %+v", r)
	}
	if h1 == h2 || h1 == parent {
		t.Fatal("distinct digests folded to one hash")
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	in := []Event{
		{Kind: BlockRemoved, Hashes: []Hash{1, 1 << 63}},
		{Kind: BlockStored, Hashes: []Hash{7, 8}, Parent: 1 << 40, HasParent: true, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2},
		{Kind: BlockStored, Hashes: []Hash{9}, Tokens: []uint32{70000, 0}, BlockSize: 2},
		{Kind: AllBlocksCleared},
	}
	p, err := NewEncoder().Encode(12.5, in)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := NewDecoder().Decode(p, &b); err != nil {
		t.Fatal(err)
	}
	if b.TS != 12.5 || len(b.Events) != len(in) {
		t.Fatalf("batch %+v", b)
	}
	for i, e := range b.Events {
		w := in[i]
		if w.Medium == "" && w.Kind != AllBlocksCleared {
			w.Medium = "GPU"
		}
		if e.Kind != w.Kind || !slices.Equal(e.Hashes, w.Hashes) || e.Parent != w.Parent || e.HasParent != w.HasParent ||
			!slices.Equal(e.Tokens, w.Tokens) || e.BlockSize != w.BlockSize || e.Medium != w.Medium {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
}

// TestDecodeReusesBuffers: decoding into the same Batch allocates nothing once its buffers
// have grown.
func TestDecodeReusesBuffers(t *testing.T) {
	p := readHex(t, "array_int.hex")
	d := NewDecoder()
	var b Batch
	if err := d.Decode(p, &b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(p, &b) }); n != 0 {
		t.Fatalf("%v allocations per decode, want 0", n)
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	good := readHex(t, "array_int.hex")
	cases := map[string][]byte{
		"empty":                     {},
		"not an array":              {0xa1, 'x'},
		"one field":                 {0x91, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
		"huge event count":          {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge token count":          append(slices.Clone(good[:40]), 0xdd, 0x7f, 0xff, 0xff, 0xff),
		"huge hash":                 {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xc6, 0xff, 0xff, 0xff, 0xff},
		"truncated":                 good[:len(good)-5],
		"negative token id":         {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x94, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xc0, 0x91, 0xff},
		"zero block size":           {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xc0, 0x90, 0x00},
		"deeply nested extra field": deepExtra(1000),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			var b Batch
			err := NewDecoder().Decode(p, &b)
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
}

// deepExtra is a batch whose third field nests n arrays.
func deepExtra(n int) []byte {
	p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90}
	p = append(p, 0x01) // rank 1
	p[0] = 0x94
	for range n {
		p = append(p, 0x91)
	}
	return append(p, 0x00)
}

// TestDecodeHostileLengthsAllocateLittle: a payload of a few bytes that announces billions of
// elements is refused without allocating for them.
func TestDecodeHostileLengthsAllocateLittle(t *testing.T) {
	p := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x94, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
		0x90, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xfe}
	d := NewDecoder()
	var b Batch
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if err := d.Decode(p, &b); err == nil {
			t.Fatal("decoded an impossible token count")
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("100 hostile decodes allocated %d bytes", n)
	}
}

// FuzzDecode: no payload panics the decoder, and what a decode holds is bounded by the
// payload's length.
func FuzzDecode(f *testing.F) {
	f.Add(readHex(f, "array_int.hex"))
	f.Add(readHex(f, "map_bytes.hex"))
	p, err := NewEncoder().Encode(1, []Event{{Kind: BlockStored, Hashes: []Hash{1, 2}, Tokens: make([]uint32, 32), BlockSize: 16},
		{Kind: BlockRemoved, Hashes: []Hash{3}}, {Kind: AllBlocksCleared}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p)
	f.Add(deepExtra(40))
	f.Fuzz(func(t *testing.T, p []byte) {
		var b Batch
		if err := NewDecoder().Decode(p, &b); err != nil {
			return
		}
		// Each event takes a byte of the payload at least, each hash and token id too.
		held := 0
		for _, e := range b.Events {
			held += len(e.Hashes) + len(e.Tokens)
		}
		if len(b.Events) > len(p) || held > len(p) {
			t.Fatalf("%d events, %d hashes and tokens from %d bytes", len(b.Events), held, len(p))
		}
	})
}

// BenchmarkDecodeBlockStored: the payload of one BlockStored of 16 tokens, as an engine
// publishes one block, decoded into a reused Batch.
func BenchmarkDecodeBlockStored(b *testing.B) {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(1000 + 37*i)
	}
	p, err := NewEncoder().Encode(1764612000.25, []Event{{Kind: BlockStored, Hashes: []Hash{1 << 62},
		Parent: 1 << 61, HasParent: true, Tokens: toks, BlockSize: 16}})
	if err != nil {
		b.Fatal(err)
	}
	d := NewDecoder()
	var batch Batch
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := d.Decode(p, &batch); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeRepeatedFieldsAllocateLinearly: an event in the map form that repeats token_ids
// many times, one id each, allocates in proportion to the payload, not to its square.
func TestDecodeRepeatedFieldsAllocateLinearly(t *testing.T) {
	const repeats = 8000
	p := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0xde, byte((repeats + 1) >> 8), byte((repeats + 1) & 0xff),
		0xa4, 't', 'y', 'p', 'e', 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd'}
	for range repeats {
		p = append(p, 0xa9, 't', 'o', 'k', 'e', 'n', '_', 'i', 'd', 's', 0x91, 0x01)
	}
	var b Batch
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := NewDecoder().Decode(p, &b); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if len(b.Events) != 1 || len(b.Events[0].Tokens) != repeats {
		t.Fatalf("decoded %+v", b.Events)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64*uint64(len(p)) {
		t.Fatalf("a %d-byte payload allocated %d bytes", len(p), n)
	}
}
