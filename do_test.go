package layer0_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/layer0ai/layer0"
)

// countSink counts the events it is sent.
type countSink struct{ n int }

func (s *countSink) Send(*layer0.Event) error { s.n++; return nil }
func (s *countSink) Flush() error             { return nil }

// TestDoValidates checks that the in-process path refuses what every HTTP front refuses, with
// a 400 naming the field, before anything reaches the sink.
func TestDoValidates(t *testing.T) {
	g, err := layer0.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	hello := []layer0.Message{{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "Hello"}}}}
	temp := 7.0
	tests := []struct {
		name  string
		req   *layer0.Request
		param string
		in    string // in the message
	}{
		{"nil request", nil, "", "request is missing"},
		{"no messages", &layer0.Request{Model: "sim", MaxTokens: 8}, "messages", "at least one message"},
		{"negative max_tokens", &layer0.Request{Model: "sim", MaxTokens: -5, Messages: hello}, "max_tokens", "at least 1"},
		{"no max_tokens", &layer0.Request{Model: "sim", Messages: hello}, "max_tokens", "at least 1"},
		{"temperature 7", &layer0.Request{Model: "sim", MaxTokens: 8, Messages: hello, Temperature: &temp}, "temperature", "between 0 and 1"},
		{"no model", &layer0.Request{MaxTokens: 8, Messages: hello}, "model", "empty"},
		{"empty text", &layer0.Request{Model: "sim", MaxTokens: 8, Messages: []layer0.Message{{Content: []layer0.Block{{}}}}},
			"messages.0.content.0.text", "non-empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sink countSink
			err := g.Do(context.Background(), tt.req, &sink)
			var e *layer0.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want a *layer0.Error", err)
			}
			if e.Status() != 400 || e.Param != tt.param || !strings.Contains(e.Message, tt.in) {
				t.Errorf("got %d param %q %q, want 400 about %q saying %q", e.Status(), e.Param, e.Message, tt.param, tt.in)
			}
			if sink.n != 0 {
				t.Errorf("got %d events sent, want none", sink.n)
			}
		})
	}
	req := &layer0.Request{Model: "sim", MaxTokens: 8, Messages: hello}
	for name, sink := range map[string]layer0.Sink{"nil sink": nil, "nil collector": (*layer0.Collector)(nil)} {
		var e *layer0.Error
		if err := g.Do(context.Background(), req, sink); !errors.As(err, &e) || e.Status() != 400 {
			t.Errorf("%s: got %v, want a 400", name, err)
		}
	}
}
