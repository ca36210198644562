package vocab

import (
	"math"
	"unicode/utf8"
)

// noRank marks a pair of adjacent parts that no entry merges.
const noRank = math.MaxUint32

// Append appends to dst the IDs that encode text and returns the extended slice; decoding them
// gives text's bytes exactly, invalid UTF-8 included. Apart from growing dst it allocates nothing.
//
// The encoding is byte-level BPE with the IDs as merge ranks (a lower ID merges first), as
// tiktoken does with cl100k_base's ranks. Instead of cl100k's pre-tokenizer regexp, text is cut
// into chunks before each space that follows a non-space, and at most maxChunk bytes long: tokens
// of cl100k never span such a cut except in runs of spaces, so the code is nearly as short, and
// the merge scratch stays on the stack. Each call encodes its text on its own: encoding the
// deltas of a stream one by one decodes to the same bytes as encoding their concatenation.
//
// internal/tokenizer's EncodeBelow(…, 65536) gives cl100k's exact split but replaces invalid
// UTF-8 with U+FFFD, as tiktoken does; an engine's delta may end inside a character, and the
// wire must carry its bytes unchanged, so the wire code has its own byte-exact loop over the
// served table (which also works for any table Parse reads, not only cl100k's).
func (v *Vocab) Append(dst []uint32, text string) []uint32 {
	for len(text) > 0 {
		n := chunkLen(text)
		dst = v.appendChunk(dst, text[:n])
		text = text[n:]
	}
	return dst
}

// chunkLen returns the length of the first chunk of s (s is not empty).
func chunkLen(s string) int {
	for i := 1; i < len(s); i++ {
		if i == maxChunk {
			// Prefer to cut at the start of a UTF-8 sequence, which keeps multi-byte entries whole.
			for j := i; j > i-utf8.UTFMax && j > 0; j-- {
				if utf8.RuneStart(s[j]) {
					return j
				}
			}
			return i
		}
		if s[i] == ' ' && s[i-1] != ' ' {
			return i
		}
	}
	return len(s)
}

// appendChunk encodes one chunk of 1 to maxChunk bytes.
func (v *Vocab) appendChunk(dst []uint32, s string) []uint32 {
	if id, ok := v.lookup(s); ok {
		return append(dst, id)
	}
	// Part i is s[pos[i]:pos[i+1]] with ID id[i]; rank[i] is the ID of the entry that merges
	// parts i and i+1, or noRank.
	var (
		pos  [maxChunk + 1]uint8
		id   [maxChunk]uint32
		rank [maxChunk]uint32
	)
	n := len(s)
	for i := range n {
		pos[i] = uint8(i)
		id[i] = v.byteID[s[i]]
	}
	pos[n] = uint8(n)
	for i := range n - 1 {
		rank[i] = v.rank(s[i : i+2])
	}
	for n > 1 {
		best, bi := uint32(noRank), -1
		for i, r := range rank[:n-1] {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		// Merge part bi+1 into part bi.
		id[bi] = best
		copy(pos[bi+1:n], pos[bi+2:n+1])
		copy(id[bi+1:n-1], id[bi+2:n])
		if bi+2 <= n-1 {
			copy(rank[bi+1:], rank[bi+2:n-1])
		}
		n--
		if bi < n-1 {
			rank[bi] = v.rank(s[pos[bi]:pos[bi+2]])
		}
		if bi > 0 {
			rank[bi-1] = v.rank(s[pos[bi-1]:pos[bi+1]])
		}
	}
	return append(dst, id[:n]...)
}

func (v *Vocab) rank(s string) uint32 {
	if id, ok := v.lookup(s); ok {
		return id
	}
	return noRank
}
