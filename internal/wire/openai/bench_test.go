package openai

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
)

func BenchmarkStreamWriterTextDelta(b *testing.B) {
	w := &countWriter{}
	sw := NewStreamWriter(w)
	sw.Send(&llm.Event{Kind: llm.EventStart, ID: "chatcmpl-1", Model: "m"})
	sw.Send(&llm.Event{Kind: llm.EventBlockStart, Block: llm.BlockText})
	ev := &llm.Event{Kind: llm.EventTextDelta, Text: " token"}
	b.ReportAllocs()
	for b.Loop() {
		_ = sw.Send(ev)
		_ = sw.Flush()
	}
}

func BenchmarkReadStream(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "vllm_text.sse"))
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(data)
		var c llm.Collector
		if err := ReadStream(r, &c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRequest(b *testing.B) {
	r, err := DecodeRequest([]byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequest(buf[:0], r)
	}
}
