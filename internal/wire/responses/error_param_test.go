package responses

import (
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
)

// TestErrorParamIsInput: an error the shared rules or the router raise about the canonical
// request's turns (a prompt too long names "messages") names the Responses API's input, in a
// whole answer's error body; other params are left as they are.
func TestErrorParamIsInput(t *testing.T) {
	for _, tt := range []struct{ param, want string }{
		{"messages", `"param":"input"`},
		{"messages.2.content.0", `"param":"input"`},
		{"max_output_tokens", `"param":"max_output_tokens"`},
		{"messagesx", `"param":"messagesx"`},
	} {
		e := &apierr.Error{Kind: apierr.InvalidRequest, Param: tt.param, Code: "context_length_exceeded", Message: "too long"}
		if got := string(AppendError(nil, e)); !strings.Contains(got, tt.want) {
			t.Errorf("param %q: %s, want %s", tt.param, got, tt.want)
		}
		if e.Param != tt.param {
			t.Errorf("AppendError changed the error's own param to %q", e.Param)
		}
	}
}
