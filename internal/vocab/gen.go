//go:build ignore

// gen derives the default wire vocabulary from tiktoken-go's embedded cl100k_base table: the
// bytes of ranks 0 to 65,535, written in the serialized form vocab.Parse reads. cl100k_base's ranks
// are BPE merge priorities, so its first 65,536 ranks are a self-consistent vocabulary of their
// own (a merge's result always ranks after both of its parts). Run with `go generate
// ./internal/vocab`; the output is deterministic and its hash names the vocabulary on the wire.
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log"
	"os"

	"github.com/tiktoken-go/tokenizer/codec"
)

const size = 1 << 16

func main() {
	c := codec.NewCl100kBase()
	var out bytes.Buffer
	out.WriteString("L0VC")
	out.WriteByte(1)
	out.Write(binary.BigEndian.AppendUint32(nil, size))
	for id := range size {
		s, err := c.Decode([]uint{uint(id)})
		if err != nil {
			log.Fatalf("gen: rank %d: %v", id, err)
		}
		if len(s) == 0 || len(s) > 255 {
			log.Fatalf("gen: rank %d: length %d does not fit a length byte", id, len(s))
		}
		out.WriteByte(byte(len(s)))
		out.WriteString(s)
	}
	if err := os.WriteFile("cl100k_65536.vocab", out.Bytes(), 0o644); err != nil {
		log.Fatalf("gen: %v", err)
	}
	fmt.Printf("gen: wrote cl100k_65536.vocab, %d entries, %d bytes\n", size, out.Len())
}
