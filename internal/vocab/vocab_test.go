package vocab

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/tiktoken-go/tokenizer/codec"
)

// defaultHash pins the default table: clients cache it under this name, so a change must be
// deliberate (regenerate with go generate, update this constant and docs/protocol.md).
const defaultHash = "810775a1ec5e67e5"

func TestDefaultIsCl100kPrefix(t *testing.T) {
	v := Default()
	if got, want := v.Len(), 1<<16; got != want {
		t.Fatalf("Len() = %d, want %d", got, want)
	}
	c := codec.NewCl100kBase()
	for id := range uint32(v.Len()) {
		want, err := c.Decode([]uint{uint(id)})
		if err != nil {
			t.Fatalf("cl100k Decode(%d): %v", id, err)
		}
		if got := string(v.Bytes(id)); got != want {
			t.Fatalf("Bytes(%d) = %q, want %q", id, got, want)
		}
	}
	if got := v.Bytes(uint32(v.Len())); got != nil {
		t.Errorf("Bytes(Len()) = %q, want nil", got)
	}
}

func TestDefaultHashIsStable(t *testing.T) {
	if got := Default().Hash(); got != defaultHash {
		t.Errorf("Hash() = %q, want %q", got, defaultHash)
	}
	var b bytes.Buffer
	n, err := Default().WriteTo(&b)
	if err != nil || n != int64(Default().Size()) {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", n, err, Default().Size())
	}
	v, err := Parse(b.Bytes())
	if err != nil {
		t.Fatalf("Parse(WriteTo output): %v", err)
	}
	if got := v.Hash(); got != defaultHash {
		t.Errorf("Hash() after round trip = %q, want %q", got, defaultHash)
	}
}

func decode(t testing.TB, v *Vocab, ids []uint32) string {
	t.Helper()
	b, err := v.AppendDecoded(nil, ids)
	if err != nil {
		t.Fatalf("AppendDecoded: %v", err)
	}
	return string(b)
}

var samples = []struct{ name, text string }{
	{"empty", ""},
	{"one byte", "a"},
	{"word", "hello"},
	{"sentence", "The quick brown fox jumps over the lazy dog."},
	{"spaces", "a  b   c    d\t\te"},
	{"leading and trailing spaces", "   padded   "},
	{"newlines", "line one\nline two\n\n\nline five\r\n"},
	{"code", "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {}\n}\n"},
	{"numbers", "1234567890 3.14159 -42 1e9"},
	{"cjk", "大型语言模型的推理服务栈，每一层都增加了延迟。"},
	{"emoji", "ok 👍🏽 fine 🇫🇷 family 👨‍👩‍👧"},
	{"mixed scripts", "Ελληνικά русский עברית العربية हिन्दी"},
	{"invalid utf-8", "bad \xff\xfe bytes \xc3 end"},
	{"all bytes", allBytes()},
	{"long word", strings.Repeat("abcdefghij", 30)},
	{"long cjk run", strings.Repeat("模型", 100)},
	{"long space run", strings.Repeat(" ", 300)},
}

func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

func TestAppendRoundTrip(t *testing.T) {
	v := Default()
	for _, tc := range samples {
		t.Run(tc.name, func(t *testing.T) {
			ids := v.Append(nil, tc.text)
			if got := decode(t, v, ids); got != tc.text {
				t.Errorf("decode(Append(%q)) = %q", tc.text, got)
			}
			for _, id := range ids {
				if id >= 1<<16 {
					t.Fatalf("id %d does not fit uint16", id)
				}
			}
		})
	}
}

func TestAppendKeepsDst(t *testing.T) {
	v := Default()
	dst := []uint32{7, 8}
	got := v.Append(dst, "hi")
	if diff := cmp.Diff([]uint32{7, 8}, got[:2]); diff != "" {
		t.Errorf("prefix changed (-want +got):\n%s", diff)
	}
}

// TestDeltasAtEveryBoundary encodes text cut in two at every byte, as deltas arrive from an
// engine, UTF-8 sequences split included: the concatenated decoding must be the text.
func TestDeltasAtEveryBoundary(t *testing.T) {
	v := Default()
	for _, tc := range samples {
		for cut := range len(tc.text) + 1 {
			ids := v.Append(nil, tc.text[:cut])
			ids = v.Append(ids, tc.text[cut:])
			if got := decode(t, v, ids); got != tc.text {
				t.Fatalf("%s: cut at %d: got %q, want %q", tc.name, cut, got, tc.text)
			}
		}
	}
}

func TestAppendRandomBytes(t *testing.T) {
	v := Default()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(200))
		for i := range b {
			// Mostly printable ASCII and spaces, sometimes any byte.
			if r.IntN(8) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = " etaoinshrdlu.,\n"[r.IntN(16)]
			}
		}
		if got := decode(t, v, v.Append(nil, string(b))); got != string(b) {
			t.Fatalf("round trip of %q: got %q", b, got)
		}
	}
}

// TestCompressionNearCl100k checks the encoder is a real BPE: on English and code its ID count
// stays within 10% of cl100k_base's own token count (a broken merge loop would emit bytes).
func TestCompressionNearCl100k(t *testing.T) {
	v := Default()
	c := codec.NewCl100kBase()
	text := strings.Repeat(samples[3].text+" "+samples[7].text+" Streaming tokens back with as few "+
		"bytes and copies as the wire allows, in one process, on one pass over the request. ", 20)
	ref, err := c.Count(text)
	if err != nil {
		t.Fatal(err)
	}
	got := len(v.Append(nil, text))
	if got > ref*11/10 {
		t.Errorf("wire IDs = %d, want at most 110%% of cl100k's %d", got, ref)
	}
	// A cl100k token's own text encodes as that one ID.
	for _, w := range []string{" the", "hello", " Streaming", "\n\n", " process"} {
		ids := v.Append(nil, w)
		if len(ids) != 1 {
			t.Errorf("Append(%q) = %v, want one ID", w, ids)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	v := Default()
	dst := make([]uint32, 0, 1024)
	text := samples[3].text + samples[9].text + samples[14].text
	if n := testing.AllocsPerRun(100, func() { dst = v.Append(dst[:0], text) }); n != 0 {
		t.Errorf("Append allocs = %v, want 0", n)
	}
}

func serialized(entries ...string) []byte {
	b := []byte("L0VC\x01")
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = append(b, byte(len(e)))
		b = append(b, e...)
	}
	return b
}

func byteEntries() []string {
	e := make([]string, 256)
	for i := range e {
		e[i] = string([]byte{byte(i)})
	}
	return e
}

func TestParse(t *testing.T) {
	small := append(byteEntries(), "ab", "abc", "ab")
	v, err := Parse(serialized(small...))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := v.Len(), 259; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	// "ab" is entry 256 and 258: encoding uses the lower ID.
	if diff := cmp.Diff([]uint32{257, 256}, v.Append(nil, "abcab")); diff != "" {
		t.Errorf("Append(abcab) (-want +got):\n%s", diff)
	}
	if _, err := v.AppendDecoded(nil, []uint32{259}); err == nil {
		t.Error("AppendDecoded(259): got nil error, want out of range")
	}
}

func truncated(b []byte) []byte { return b[:len(b)-1] }

func TestParseErrors(t *testing.T) {
	good := serialized(byteEntries()...)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "bad magic"},
		{"bad magic", append([]byte("L0VX"), good[4:]...), "bad magic"},
		{"bad format version", append([]byte("L0VC\x02"), good[5:]...), "format version 2"},
		{"zero entries", []byte("L0VC\x01\x00\x00\x00\x00"), "entry count 0"},
		{"count beyond data", []byte("L0VC\x01\x00\x00\x01\x00a"), "exceeds the data"},
		{"truncated entry", truncated(serialized(append(byteEntries(), "abc")...)), "length 3 exceeds data"},
		{"trailing bytes", append(append([]byte{}, good...), 1, 'x'), "trailing bytes"},
		{"empty entry", serialized(append(byteEntries(), "", "xyz")...), "empty entry"},
		{"missing byte", serialized(byteEntries()[1:]...), "byte 0x00 has no entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range samples {
		f.Add(s.text)
	}
	v := Default()
	f.Fuzz(func(t *testing.T, text string) {
		ids := v.Append(nil, text)
		if got := decode(t, v, ids); got != text {
			t.Fatalf("decode(Append(%q)) = %q", text, got)
		}
		if utf8.ValidString(text) && len(ids) > len(text) {
			t.Fatalf("%d IDs for %d bytes", len(ids), len(text))
		}
	})
}

func BenchmarkAppendDelta(b *testing.B) {
	v := Default()
	dst := make([]uint32, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		dst = v.Append(dst[:0], " tokens")
	}
}

func BenchmarkAppendParagraph(b *testing.B) {
	v := Default()
	text := strings.Repeat(samples[3].text+" "+samples[7].text, 4)
	dst := make([]uint32, 0, 1024)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = v.Append(dst[:0], text)
	}
}

func BenchmarkDefaultParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(defaultData); err != nil {
			b.Fatal(err)
		}
	}
}
