package binary

import (
	ebin "encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	"github.com/layer0ai/layer0/internal/vocab"
)

// part is a run of bytes and what it means; a vector's bytes are its parts' concatenation.
type part struct {
	Hex     string `json:"hex"`
	Meaning string `json:"meaning"`
}

func spaced(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(' ')
		}
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}

// Part builders: an encoder of the test's own, so the vectors check the package's encoder.
func raw(b []byte, meaning string) part { return part{spaced(b), meaning} }
func bs(hexs, meaning string) part {
	b, err := hex.DecodeString(strings.ReplaceAll(hexs, " ", ""))
	if err != nil {
		panic(err)
	}
	return raw(b, meaning)
}
func txt(s, meaning string) part { return raw([]byte(s), fmt.Sprintf("%s %q", meaning, s)) }
func u8(n int, meaning string) part {
	return raw([]byte{byte(n)}, fmt.Sprintf("%s %d", meaning, n))
}
func u16(n int, meaning string) part {
	return raw(ebin.BigEndian.AppendUint16(nil, uint16(n)), fmt.Sprintf("%s %d (uint16)", meaning, n))
}
func u32(n int, meaning string) part {
	return raw(ebin.BigEndian.AppendUint32(nil, uint32(n)), fmt.Sprintf("%s %d (uint32)", meaning, n))
}
func uv(n int, meaning string) part {
	return raw(ebin.AppendUvarint(nil, uint64(n)), fmt.Sprintf("%s %d (uvarint)", meaning, n))
}
func f64(f float64, meaning string) part {
	return raw(ebin.BigEndian.AppendUint64(nil, math.Float64bits(f)), fmt.Sprintf("%s %v (float64)", meaning, f))
}

// str is a version-2 str: uvarint length and bytes, as two parts.
func str(s, meaning string) []part {
	return []part{uv(len(s), meaning+" length"), txt(s, meaning)}
}

// tokens1 is a version-1 token frame of the IDs encoding texts (one entry per ID).
func tokenFrame(v Version, meaning string, texts ...string) []part {
	voc := vocab.Default()
	var ids []uint32
	var names []string
	for _, t := range texts {
		for _, id := range voc.Append(nil, t) {
			ids = append(ids, id)
			names = append(names, fmt.Sprintf("%d %q", id, voc.Bytes(id)))
		}
	}
	var payload []byte
	for _, id := range ids {
		if v == V1 {
			payload = ebin.BigEndian.AppendUint16(payload, uint16(id))
		} else {
			payload = ebin.AppendUvarint(payload, uint64(id))
		}
	}
	return []part{
		frameHeader(v, FrameToken, len(payload), meaning),
		raw(payload, fmt.Sprintf("token IDs: %s", strings.Join(names, ", "))),
	}
}

// byteToken is the version-1 token ID of the entry that is the single byte b.
func byteToken(b byte, meaning string) part {
	id := vocab.Default().Append(nil, string([]byte{b}))[0]
	return raw(ebin.BigEndian.AppendUint16(nil, uint16(id)), fmt.Sprintf("token ID %d, byte %02x: %s", id, b, meaning))
}

func frameHeader(v Version, t FrameType, n int, meaning string) part {
	b := []byte{byte(t)}
	if v == V1 {
		b = ebin.BigEndian.AppendUint16(b, uint16(n))
		return raw(b, fmt.Sprintf("frame type %d (%s), length %d (uint16): %s", t, t, n, meaning))
	}
	b = ebin.AppendUvarint(b, uint64(n))
	return raw(b, fmt.Sprintf("frame type %d (%s), length %d (uvarint): %s", t, t, n, meaning))
}

// frame is a frame with its header computed from its payload parts.
func frame(v Version, t FrameType, meaning string, payload ...part) []part {
	n := 0
	for _, p := range payload {
		n += len(mustHex(p.Hex))
	}
	return append([]part{frameHeader(v, t, n, meaning)}, payload...)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func cat(groups ...any) []part {
	var out []part
	for _, g := range groups {
		switch g := g.(type) {
		case part:
			out = append(out, g)
		case []part:
			out = append(out, g...)
		default:
			panic(fmt.Sprintf("cat: %T", g))
		}
	}
	return out
}

func joined(ps []part) []byte {
	var b []byte
	for _, p := range ps {
		b = append(b, mustHex(p.Hex)...)
	}
	return b
}
