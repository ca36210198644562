package limit

import (
	"net/http"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func text(s string) []llm.Block { return []llm.Block{{Type: llm.BlockText, Text: s}} }

func TestSizesCheck(t *testing.T) {
	msgs := func(n int) []llm.Message {
		m := make([]llm.Message, n)
		for i := range m {
			m[i] = llm.Message{Content: text("hi")}
		}
		return m
	}
	tests := []struct {
		name      string
		sizes     Sizes
		req       llm.Request
		wantParam string
		wantMsg   string
	}{
		{name: "zero checks nothing", req: llm.Request{Messages: msgs(1000), System: text(strings.Repeat("x", 1e6))}},
		{name: "messages at the limit", sizes: Sizes{MaxMessages: 3}, req: llm.Request{Messages: msgs(3)}},
		{name: "too many messages", sizes: Sizes{MaxMessages: 3}, req: llm.Request{Messages: msgs(4)},
			wantParam: "messages", wantMsg: "messages: 4 messages, more than the limit of 3"},
		{name: "system too long", sizes: Sizes{MaxContentBytes: 5}, req: llm.Request{System: text("123456")},
			wantParam: "system", wantMsg: "system: 6 bytes, more than the limit of 5 per message"},
		{name: "content at the limit", sizes: Sizes{MaxContentBytes: 5}, req: llm.Request{Messages: []llm.Message{
			{Content: []llm.Block{{Text: "12"}, {Text: "345"}}}}}},
		{name: "blocks add up", sizes: Sizes{MaxContentBytes: 5}, req: llm.Request{Messages: []llm.Message{
			{Content: text("ok")},
			{Content: []llm.Block{{Text: "123"}, {Type: llm.BlockImage, Data: "abc"}}}}},
			wantParam: "messages[1].content", wantMsg: "messages[1].content: 6 bytes, more than the limit of 5 per message"},
		{name: "tool input and nested results count", sizes: Sizes{MaxContentBytes: 10}, req: llm.Request{Messages: []llm.Message{
			{Content: []llm.Block{{Type: llm.BlockToolUse, Input: []byte(`{"a":1}`)}}},
			{Content: []llm.Block{{Type: llm.BlockToolResult, Content: text("0123456789x")}}}}},
			wantParam: "messages[1].content", wantMsg: "11 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sizes.Check(&tt.req)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			e := apierr.From(err)
			if e == nil || e.Kind != apierr.InvalidRequest || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantMsg) {
				t.Fatalf("got %#v, want 400 param %q message containing %q", e, tt.wantParam, tt.wantMsg)
			}
		})
	}
}

func TestSizesBodyAndHeader(t *testing.T) {
	s := Sizes{MaxBodyBytes: 10, MaxHeaderBytes: 30}
	for _, tt := range []struct {
		n       int64
		wantErr bool
	}{{-1, false}, {10, false}, {11, true}} {
		err := s.CheckBody(tt.n)
		if (err != nil) != tt.wantErr {
			t.Errorf("CheckBody(%d): got %v, want error %v", tt.n, err, tt.wantErr)
		}
		if err != nil && (apierr.From(err).Kind != apierr.RequestTooLarge || !strings.Contains(err.Error(), "the limit is 10 bytes, the body is 11 bytes")) {
			t.Errorf("CheckBody(%d): got %v, want a 413 naming both sizes", tt.n, err)
		}
	}

	// A body that turns out larger than declared (or had no length) is refused as it is read.
	if err := s.CheckBodyRead(10); err != nil {
		t.Errorf("CheckBodyRead(10): %v", err)
	}
	if e := apierr.From(s.CheckBodyRead(11)); e.Kind != apierr.RequestTooLarge || !strings.Contains(e.Message, "the limit is 10 bytes") {
		t.Errorf("CheckBodyRead(11): got %v, want 413", e)
	}

	small := http.Header{"X-A": {"1"}}                                // 3+1+4 = 8
	big := http.Header{"X-A": {"1"}, "X-Long": {"abcdefghijklmnopq"}} // 8 + 6+17+4 = 35
	if err := s.CheckHeader(small); err != nil {
		t.Errorf("CheckHeader(small): got %v, want nil", err)
	}
	err := s.CheckHeader(big)
	if e := apierr.From(err); e == nil || e.Kind != apierr.RequestTooLarge || !strings.Contains(e.Message, "35 bytes, the limit is 30") {
		t.Errorf("CheckHeader(big): got %v, want 413 naming 35 and 30", err)
	}
	if err := (Sizes{}).CheckHeader(big); err != nil {
		t.Errorf("zero Sizes: got %v, want nil", err)
	}
}
