package llm

import "unsafe"

// Arena makes the strings of one stream's events (a delta's Text) from the bytes an engine's
// reader holds: each string is copied into a block it shares with the strings made before it,
// so a hundred small deltas cost a few allocations rather than a hundred. A block is never
// written again where a string lies, so the strings are as immutable as any other (a Sink may
// keep them); one kept string keeps its block alive, at most arenaMaxBlock bytes. The zero
// value is ready to use. An Arena is not safe for concurrent use.
type Arena struct {
	block []byte
}

const (
	arenaFirstBlock = 512
	arenaMaxBlock   = 4 << 10
	// arenaMaxString is the longest string an Arena copies into a block; a longer one is
	// allocated alone, as it would fill most of a block.
	arenaMaxString = 512
)

// String returns b as a string that does not change when b does.
func (a *Arena) String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaMaxString {
		return string(b)
	}
	if cap(a.block)-len(a.block) < len(b) {
		size := min(max(2*cap(a.block), arenaFirstBlock), arenaMaxBlock)
		a.block = make([]byte, 0, size)
	}
	n := len(a.block)
	a.block = append(a.block, b...)
	return unsafe.String(&a.block[n], len(b))
}
