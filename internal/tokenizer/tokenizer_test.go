package tokenizer

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	tk "github.com/tiktoken-go/tokenizer"
)

// corpus is varied text whose token ids must equal the library's: prose, code, JSON, numbers,
// contractions, every kind of whitespace and line break, non-Latin scripts, emoji, combining
// marks, invalid UTF-8 and pieces long enough for the heap merge.
var corpus = []string{
	"",
	"Hello, world!",
	"You are a helpful assistant. What is the capital of France? Please answer briefly.",
	"I'm sure they'll say we've done what you'd've LIKED. IT'S DONE. 'Tis 're 'VE 'Ll 'x",
	"don'tſ 'ſ 'S 'T 'M 'D 'RE 'rE 'LL 'lL",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n\n\n",
	"if (a <= b && c != d) { return x->y; } // comment\r\n\r\n  \r\n    return;",
	"a\n  \nb",
	"a\n\n  \n  x",
	"trailing spaces   \n\n   \t\t  \n",
	"    indented\n        deeper\n",
	"   ",
	" ",
	"\t\t\tx",
	"x \t y",
	"x  \u00a0\u3000y",
	"line\u2028sep\u2029para\u0085nel\u000bvt\u000cff",
	"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}",
	"1234567890 3.14159 1e10 -42 0x1F 1,000,000 ٣٤٥ ①②③ ½",
	"你好，世界！这是一个测试。日本語のテキストです。한국어 텍스트",
	"Здравствуй, мир! Ελληνικά κείμενα. עברית מימין לשמאל. العربية مرحبا",
	"हिन्दी पाठ यहाँ है। தமிழ் உரை",
	"emoji 🙂👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 keycap 1️⃣",
	"combining e\u0301 a\u0308 n\u0303 Z\u0335\u0321a\u0337l\u0334g\u0336o",
	"\xff\xfe invalid \xc3\x28 utf8 \xe2\x82 end\x80",
	"control \x00\x01\x1f\x7f chars",
	"!!!??? ... --- === *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] ~~~ ``` '''",
	" !!!\n\n\r\n?",
	"https://example.com/path?query=value&x=1#frag user@example.com",
	strings.Repeat("a", 300),
	strings.Repeat("ab", 200),
	"pneumonoultramicroscopicsilicovolcanoconiosis" + strings.Repeat("xyz", 60),
	strings.Repeat(" ", 500) + "x",
	strings.Repeat("\n", 300),
	strings.Repeat("=", 257),
	strings.Repeat("é", 150),
	strings.Repeat("日本", 80),
	"<|endoftext|> is encoded as plain text <|im_start|>",
}

func library(t testing.TB) tk.Codec {
	t.Helper()
	c, err := tk.Get(tk.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func libraryIDs(t testing.TB, lib tk.Codec, s string) []uint32 {
	t.Helper()
	ids, _, err := lib.Encode(s)
	if err != nil {
		t.Fatalf("library Encode(%q): %v", s, err)
	}
	if len(ids) == 0 {
		return nil
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// comparable reports whether the library is a valid oracle for s: it drops DEL (0x7F), which
// this package encodes (see the package comment).
func comparable(s string) bool { return !strings.Contains(s, "\x7f") }

func checkSame(t *testing.T, c *Codec, lib tk.Codec, s string) {
	t.Helper()
	if !comparable(s) {
		return
	}
	want := libraryIDs(t, lib, s)
	got := c.Encode(nil, s)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Encode(%q) differs from the library (-want +got):\n%s", s, diff)
	}
	if n := c.Count(s); n != len(want) {
		t.Errorf("Count(%q) = %d, want %d", s, n, len(want))
	}
}

func TestEncodeMatchesLibrary(t *testing.T) {
	c, lib := Default(), library(t)
	for _, s := range corpus {
		checkSame(t, c, lib, s)
	}
	checkSame(t, c, lib, strings.Join(corpus, "\n"))
}

// TestEncodeMatchesLibraryRandom checks strings drawn from an alphabet of the characters where
// the split rules meet: letters, digits, apostrophes, spaces of all kinds, line breaks, symbols,
// non-Latin letters and numbers, marks, and bytes that are not UTF-8.
func TestEncodeMatchesLibraryRandom(t *testing.T) {
	c, lib := Default(), library(t)
	alphabet := []string{"a", "B", "z", "'", "s", "t", "re", "ll", "ſ", "0", "7", " ", "  ", "\t", "\n", "\r",
		"\r\n", "\u00a0", "\u3000", "\u2028", ".", ",", "!", "(", "{", "\"", "é", "日", "٣", "\u0301", "🙂",
		"\xff", "\xc3", "_", "-", "/", "ab", "the", " the", "ing"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		var sb strings.Builder
		for range rng.IntN(24) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		checkSame(t, c, lib, sb.String())
	}
}

func TestDEL(t *testing.T) {
	c := Default()
	tests := []struct {
		in   string
		want []uint32
	}{
		{"\x7f", []uint32{221}},
		{"a\x7fb", []uint32{64, 221, 65}},
		{"\x7f chars", []uint32{221, 23861}},
	}
	for _, tt := range tests {
		if got := c.Encode(nil, tt.in); !cmp.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	c := Default()
	for _, s := range corpus {
		if !utf8.ValidString(s) {
			continue
		}
		if got := string(c.Decode(nil, c.Encode(nil, s))); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
}

func TestEncodeBelow(t *testing.T) {
	c := Default()
	for _, s := range corpus {
		if got, want := c.EncodeBelow(nil, s, noRank), c.Encode(nil, s); !cmp.Equal(got, want) {
			t.Errorf("EncodeBelow(%q, no limit) = %v, want Encode's %v", s, got, want)
		}
		for _, limit := range []uint32{256, 1000, 65536} {
			ids := c.EncodeBelow(nil, s, limit)
			for _, id := range ids {
				if id >= limit {
					t.Fatalf("EncodeBelow(%q, %d) yields id %d", s, limit, id)
				}
			}
			if utf8.ValidString(s) {
				if got := string(c.Decode(nil, ids)); got != s {
					t.Errorf("Decode(EncodeBelow(%q, %d)) = %q", s, limit, got)
				}
			}
			if n, full := len(ids), c.Count(s); n < full {
				t.Errorf("EncodeBelow(%q, %d) has %d tokens, fewer than the full vocabulary's %d", s, limit, n, full)
			}
		}
	}
}

func TestToken(t *testing.T) {
	c := Default()
	tests := []struct {
		id   uint32
		want string
	}{
		{0, "!"},
		{198, "\n"},
		{882, "user"},
		{78191, "assistant"},
		{9125, "system"},
		{16297, "tools"},
		{EndOfText, "<|endoftext|>"},
		{IMStart, "<|im_start|>"},
		{IMEnd, "<|im_end|>"},
		{100256, ""},
		{ImageID, ""},
	}
	for _, tt := range tests {
		if got := c.Token(tt.id); got != tt.want {
			t.Errorf("Token(%d) = %q, want %q", tt.id, got, tt.want)
		}
	}
	if got, want := c.VocabSize(), 100256; got != want {
		t.Errorf("VocabSize() = %d, want %d", got, want)
	}
	for _, tt := range tests[1:6] {
		if got, ok := c.Rank(tt.want); !ok || got != tt.id {
			t.Errorf("Rank(%q) = %d, %v, want %d", tt.want, got, ok, tt.id)
		}
	}
	if _, ok := c.Rank("<|endoftext|>"); ok {
		t.Errorf("Rank(%q) found a special token; want only ordinary ones", "<|endoftext|>")
	}
}

func TestMergeHeapMatchesScan(t *testing.T) {
	c := Default()
	rng := rand.New(rand.NewPCG(3, 4))
	letters := "abcdefghijklmnopqrstuvwxyz      eeetttaaa"
	var s bpeScratch
	for range 500 {
		n := 1 + rng.IntN(scanMax)
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		piece := string(b)
		scan := append([]part(nil), c.merge(&s, piece, noRank)...)
		heap := append([]part(nil), c.mergeHeap(&s, piece, noRank)...)
		if len(scan) != len(heap) {
			t.Fatalf("piece %q: scan gives %d parts, heap %d", piece, len(scan), len(heap))
		}
		for i := range scan {
			if scan[i].off != heap[i].off {
				t.Fatalf("piece %q: part %d at %d by scan, %d by heap", piece, i, scan[i].off, heap[i].off)
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	c := Default()
	s := strings.Join(corpus[:24], " ") // valid UTF-8: invalid input is repaired in a copy
	dst := make([]uint32, 0, 4096)
	if n := testing.AllocsPerRun(20, func() { c.Count(s) }); n != 0 {
		t.Errorf("Count allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(20, func() { dst = c.Encode(dst[:0], s) }); n != 0 {
		t.Errorf("Encode into a large enough buffer allocates %v times per call, want 0", n)
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range corpus[:20] {
		f.Add(s)
	}
	c, lib := Default(), library(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !comparable(s) {
			t.Skip("the library drops DEL")
		}
		if len(s) > 1024 {
			t.Skip("long inputs make minimizing through the slow library stall the run")
		}
		want := libraryIDs(t, lib, s)
		if got := c.Encode(nil, s); !cmp.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v, want the library's %v", s, got, want)
		}
	})
}

var (
	benchShort = "You are a helpful assistant. What is the capital of France? Please answer briefly."
	benchLong  = strings.Repeat("The quick brown fox jumps over the lazy dog; it's 2024, and func main() { fmt.Println(\"hi\") }\n", 22)
)

func BenchmarkCount(b *testing.B) {
	c := Default()
	for _, bc := range []struct{ name, s string }{{"short", benchShort}, {"2KB", benchLong}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				c.Count(bc.s)
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	c := Default()
	for _, bc := range []struct{ name, s string }{{"short", benchShort}, {"2KB", benchLong}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			dst := make([]uint32, 0, 1024)
			for b.Loop() {
				dst = c.Encode(dst[:0], bc.s)
			}
		})
	}
}

// BenchmarkLibraryCount is the reference this package replaces on the hot path.
func BenchmarkLibraryCount(b *testing.B) {
	lib := library(b)
	for _, bc := range []struct{ name, s string }{{"short", benchShort}, {"2KB", benchLong}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				if _, err := lib.Count(bc.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// maxBody is the largest request body the server accepts by default (limit.max_body_bytes), the
// largest text one request can ask the tokenizer to count.
const maxBody = 32 << 20

// pathological returns inputs of n bytes that are each one pre-tokenizer piece (or close to it),
// and ordinary text of the same size to compare their cost with.
func pathological(n int) []struct{ name, s string } {
	return []struct{ name, s string }{
		{"ordinary", strings.Repeat(benchLong, n/len(benchLong)+1)[:n]},
		{"letter", strings.Repeat("a", n)},
		{"space", strings.Repeat(" ", n)},
		{"symbol", strings.Repeat("=", n)},
		{"newline", strings.Repeat("\n", n)},
		{"cjk", strings.Repeat("日", n/3)},
		{"period3", strings.Repeat("abc", n/3)},
		{"word", randomWord(n)},
	}
}

// randomWord returns n random lowercase letters: one piece that no chunk repeats.
func randomWord(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return string(b)
}

// TestLongPiecesCostLikeOrdinaryText counts the largest body's worth of runs of one character
// (and of three repeating), each one pre-tokenizer piece, and checks that each costs no more time
// than ordinary text of the same size (with a generous margin for a busy machine) and almost no
// memory: merging such a piece whole took a minute and 2 GB.
func TestLongPiecesCostLikeOrdinaryText(t *testing.T) {
	if testing.Short() {
		t.Skip("counts 32 MiB inputs")
	}
	c := Default()
	inputs := pathological(maxBody)
	timed := func(s string) (time.Duration, uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		c.Count(s)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		return took, after.TotalAlloc - before.TotalAlloc
	}
	ordinary, _ := timed(inputs[0].s)
	for _, in := range inputs[1:] {
		if in.name == "word" {
			continue // random letters: merged in full, chunk by chunk (see the benchmark)
		}
		took, alloc := timed(in.s)
		if budget := 2*ordinary + time.Second; took > budget && !raceEnabled {
			t.Errorf("%s: counted %d bytes in %v, more than twice ordinary text's %v", in.name, len(in.s), took, ordinary)
		}
		if alloc > 1<<20 {
			t.Errorf("%s: counting %d bytes allocated %d bytes, want under 1 MiB", in.name, len(in.s), alloc)
		}
	}
}

// TestLongPiecesRoundTrip checks the chunked merge of long pieces: the ids decode to the text,
// Count agrees with Encode, and the remembered chunks give what merging them again gives.
func TestLongPiecesRoundTrip(t *testing.T) {
	c := Default()
	for _, in := range pathological(10*MaxPiece + 7) {
		for _, s := range []string{in.s, "x " + in.s + " y", in.s + "\n" + in.s} {
			ids := c.Encode(nil, s)
			if got := string(c.Decode(nil, ids)); got != s {
				t.Errorf("%s: Decode(Encode(s)) differs from s (%d bytes, got %d)", in.name, len(s), len(got))
			}
			if n := c.Count(s); n != len(ids) {
				t.Errorf("%s: Count = %d, Encode gave %d ids", in.name, n, len(ids))
			}
			var direct []uint32
			var scratch bpeScratch
			for i := 0; i < len(s); {
				end := split(s, i)
				for j := i; i < end; i = j {
					j = chunk(s, i, end)
					if id, ok := c.ranks[s[i:j]]; ok {
						direct = append(direct, id)
						continue
					}
					parts := c.merge(&scratch, s[i:j], noRank)
					for k := 0; k < len(parts)-1; k++ {
						direct = append(direct, c.ranks[s[i:j][parts[k].off:parts[k+1].off]])
					}
				}
			}
			if !cmp.Equal(ids, direct) {
				t.Errorf("%s: Encode with remembered chunks differs from merging every chunk", in.name)
			}
		}
	}
}

// BenchmarkCountPathological counts the largest body's worth of one repeated character, the
// input that made byte-pair merging quadratic-ish in time and linear in memory per piece, next
// to ordinary text of the same size.
func BenchmarkCountPathological(b *testing.B) {
	c := Default()
	for _, bc := range pathological(maxBody) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				c.Count(bc.s)
			}
		})
	}
}
