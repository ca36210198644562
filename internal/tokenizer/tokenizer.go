// Package tokenizer is an offline byte-pair-encoding tokenizer over OpenAI's cl100k_base ranks,
// taken once from the table embedded in github.com/tiktoken-go/tokenizer. The library's own
// encoder runs a backtracking regexp over a []rune copy (about 6 µs and 100 allocations for an
// 80-byte prompt), so this package has its own pre-tokenizer — a hand-written matcher equivalent
// to the library's cl100k split pattern — and its own merge loop over the same ranks: zero
// allocations, a few hundred nanoseconds for a short prompt, and token ids identical to the
// library's (proven by tests and a differential fuzz test against it).
//
// One deliberate quirk is kept for that identity: in the alternative `\s*[\r\n]+` the library's
// generated matcher stops at the first line break of a whitespace run instead of the last, so
// "a\n  \nb" splits as "a", "\n", "  \n", "b" where Python tiktoken gives "a", "\n  \n", "b".
// Counts can differ from OpenAI's by a token on such blank lines with trailing spaces.
//
// One library defect is not kept: its generated character bitmaps leave out DEL (0x7F), so no
// branch matches it and the library drops the character from its output. Here DEL is a symbol,
// as in the pattern and in Python tiktoken, and encodes as token 221.
//
// A Codec is immutable once loaded and safe for concurrent use; Default loads the one
// process-wide instance on first use (about 20 ms).
package tokenizer

import (
	"fmt"
	"iter"
	"sync"
	"unicode/utf8"

	tk "github.com/tiktoken-go/tokenizer"
)

// Special token ids. cl100k_base defines EndOfText; IMStart and IMEnd are the ChatML markers of
// the models that use cl100k_base, used here to frame messages in AppendRequest.
const (
	EndOfText uint32 = 100257
	IMStart   uint32 = 100264
	IMEnd     uint32 = 100265
)

var specials = map[uint32]string{
	EndOfText: "<|endoftext|>",
	100258:    "<|fim_prefix|>",
	100259:    "<|fim_middle|>",
	100260:    "<|fim_suffix|>",
	IMStart:   "<|im_start|>",
	IMEnd:     "<|im_end|>",
	100276:    "<|endofprompt|>",
}

// Codec encodes text into cl100k_base token ids. It has no exported fields; get one from
// Default. It is safe for concurrent use.
type Codec struct {
	ranks  map[string]uint32 // token bytes → id (the rank is the id)
	tokens []string          // id → token bytes, for the ordinary ids 0..len-1
	maxTok int               // the length of the longest ordinary token, in bytes
}

var (
	defaultOnce  sync.Once
	defaultCodec *Codec
)

// Default returns the process-wide cl100k_base codec, loading it on the first call. It panics
// only if the table embedded in the tiktoken-go module is unreadable, which is a build defect.
func Default() *Codec {
	defaultOnce.Do(func() {
		c, err := load()
		if err != nil {
			panic(err)
		}
		defaultCodec = c
	})
	return defaultCodec
}

// load reads every ordinary token of cl100k_base out of tiktoken-go, which keeps its table
// unexported: decoding each id in turn is the only public way to it.
func load() (*Codec, error) {
	lib, err := tk.Get(tk.Cl100kBase)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load cl100k_base: %w", err)
	}
	const ordinary = 100256 // ids 0..100255; the specials follow
	c := &Codec{ranks: make(map[string]uint32, ordinary), tokens: make([]string, ordinary)}
	ids := []uint{0}
	for id := range ordinary {
		ids[0] = uint(id)
		s, err := lib.Decode(ids)
		if err != nil || s == "" {
			return nil, fmt.Errorf("tokenizer: load cl100k_base: token %d: %v", id, err)
		}
		c.tokens[id] = s
		c.ranks[s] = uint32(id)
		c.maxTok = max(c.maxTok, len(s))
	}
	for b := range 256 { // merging ends in single bytes at worst, so each must be a token
		if _, ok := c.ranks[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("tokenizer: load cl100k_base: byte %#x has no token", b)
		}
	}
	return c, nil
}

// MaxTokenBytes is the length in bytes of the longest ordinary token (128 for cl100k_base).
func (c *Codec) MaxTokenBytes() int { return c.maxTok }

// VocabSize is the number of ordinary token ids: Encode yields ids in [0, VocabSize).
func (c *Codec) VocabSize() int { return len(c.tokens) }

// Token returns the bytes of token id (not always valid UTF-8 on its own: a multi-byte character
// can span tokens), the name of a special token such as "<|im_start|>", or "" for an unknown id.
func (c *Codec) Token(id uint32) string {
	if int(id) < len(c.tokens) {
		return c.tokens[id]
	}
	return specials[id]
}

// Rank returns the id of the ordinary token whose bytes are exactly tok.
func (c *Codec) Rank(tok string) (uint32, bool) {
	id, ok := c.ranks[tok]
	return id, ok
}

// Decode appends the bytes of the tokens ids to dst; unknown ids contribute nothing.
func (c *Codec) Decode(dst []byte, ids []uint32) []byte {
	for _, id := range ids {
		dst = append(dst, c.Token(id)...)
	}
	return dst
}

// Count returns the number of tokens Encode would produce for s, without allocating.
func (c *Codec) Count(s string) int {
	n := 0
	var scratch bpeScratch
	var memo chunkMemo
	for piece, long := range pieces(validUTF8(s)) {
		if !long {
			if _, ok := c.ranks[piece]; ok {
				n++
			} else {
				n += len(c.merge(&scratch, piece, noRank)) - 1
			}
			continue
		}
		if k, ok := memo.find(piece); ok {
			n += memo.end[k]
			continue
		}
		m := len(c.merge(&scratch, piece, noRank)) - 1
		memo.put(piece, 0, m)
		n += m
	}
	return n
}

// Encode appends the token ids of s to dst and returns the extended slice, so that callers can
// reuse a buffer. Invalid UTF-8 is encoded as U+FFFD per bad byte, as the library does.
func (c *Codec) Encode(dst []uint32, s string) []uint32 {
	return c.encode(dst, s, noRank)
}

// EncodeBelow is Encode restricted to the ids below limit: byte-pair merging stops where the
// next merge would need a token of rank limit or more. cl100k_base's ranks are merge priorities,
// so its first limit ranks (limit ≥ 256, every single byte) form a self-consistent vocabulary;
// with limit 65536 every id fits a uint16.
func (c *Codec) EncodeBelow(dst []uint32, s string, limit uint32) []uint32 {
	return c.encode(dst, s, limit)
}

func (c *Codec) encode(dst []uint32, s string, limit uint32) []uint32 {
	var scratch bpeScratch
	var memo chunkMemo
	for piece, long := range pieces(validUTF8(s)) {
		if long {
			if k, ok := memo.find(piece); ok {
				at := len(dst)
				dst = append(dst, dst[memo.at[k]:memo.end[k]]...)
				memo.at[k], memo.end[k] = at, len(dst)
				continue
			}
		}
		at := len(dst)
		if id, ok := c.ranks[piece]; ok && id < limit {
			dst = append(dst, id)
		} else {
			parts := c.merge(&scratch, piece, limit)
			for k := 0; k < len(parts)-1; k++ {
				dst = append(dst, c.ranks[piece[parts[k].off:parts[k+1].off]])
			}
		}
		if long {
			memo.put(piece, at, len(dst))
		}
	}
	return dst
}

// pieces yields the pieces of s that are merged whole, in order: the pre-tokenizer's pieces
// (split), one longer than MaxPiece in chunks (chunk), with whether the piece is such a chunk.
func pieces(s string) iter.Seq2[string, bool] {
	return func(yield func(piece string, long bool) bool) {
		for i := 0; i < len(s); {
			end := split(s, i)
			long := end-i > MaxPiece
			for j := i; i < end; i = j {
				j = chunk(s, i, end)
				if !yield(s[i:j], long) {
					return
				}
			}
		}
	}
}

// MaxPiece is the longest piece merged whole, in bytes. A longer piece — only a run of one
// class of character makes one: a word without spaces, a run of spaces, line breaks or symbols —
// is merged in chunks of at most MaxPiece bytes cut at character boundaries, so that the work
// and the memory of one merge stay bounded however the text is made. cl100k_base's longest token
// is far shorter (128 bytes), so a chunk changes the ids only around its cut: a token or so per
// MaxPiece bytes of such a run, where tiktoken would spend seconds and gigabytes on a 30 MB one.
// A chunk equal to one of the last few (a run of one character, or of a few repeating) reuses
// that one's tokens instead of merging again, so such a run costs less than ordinary text.
const MaxPiece = 1024

// chunk returns the end of the next chunk to merge of the piece s[i:end]: all of it, or its
// first MaxPiece bytes or fewer, cut at a character boundary.
func chunk(s string, i, end int) int {
	if end-i <= MaxPiece {
		return end
	}
	j := i + MaxPiece
	for j > i && !utf8.RuneStart(s[j]) {
		j--
	}
	return j
}

// chunkMemo remembers the tokens of the last few chunks of a long piece: in Count their number
// (end), in encode where they are in dst (dst[at:end]).
type chunkMemo struct {
	chunk   [4]string
	at, end [4]int
	next    int
}

// find returns the slot of a remembered chunk equal to piece.
func (m *chunkMemo) find(piece string) (int, bool) {
	for k, c := range m.chunk {
		if len(c) == len(piece) && c == piece {
			return k, true
		}
	}
	return 0, false
}

// put remembers piece's tokens, in place of the oldest chunk remembered.
func (m *chunkMemo) put(piece string, at, end int) {
	m.chunk[m.next], m.at[m.next], m.end[m.next] = piece, at, end
	m.next = (m.next + 1) % len(m.chunk)
}

// validUTF8 returns s with every byte that is not part of a valid UTF-8 sequence replaced by
// U+FFFD, which is what the library's []rune conversion does before matching.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	buf := make([]byte, 0, len(s)+8)
	for _, r := range s {
		buf = utf8.AppendRune(buf, r)
	}
	return string(buf)
}
