package fake

import (
	"fmt"
	"net/http"
	"strings"
)

const (
	anthropicID     = "msg_01XFDUDYJgAACzvnptvVoYEL"
	anthropicToolID = "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
)

// anthropicErrorJSON is the Messages API's error object, as its in-stream error event carries it.
const anthropicErrorJSON = `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`

// anthropicError is the Messages API's in-stream error event.
const anthropicError = "event: error\ndata: " + anthropicErrorJSON + "\n\n"

func event(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

// anthropicEvents writes the stream in the hosted API's order: message_start, then per block
// content_block_start (a ping after the first), deltas and content_block_stop, then
// message_delta with the stop reason and output tokens, and message_stop.
func anthropicEvents(rp *reply) []string {
	evs := []string{event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`,
		anthropicID, q(rp.model), rp.prompt, rp.written, rp.cached))}
	stop := "end_turn"
	if rp.stop != "" {
		stop = rp.stop
	}
	if rp.tool != "" {
		evs = append(evs, event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":%s,"input":{}}}`, anthropicToolID, q(rp.tool))),
			event("ping", `{"type": "ping"}`))
		for _, a := range rp.args {
			evs = append(evs, event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+q(a)+`}}`))
		}
		stop = "tool_use"
	} else {
		evs = append(evs, event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			event("ping", `{"type": "ping"}`))
		for _, w := range rp.words {
			evs = append(evs, event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+q(w)+`}}`))
		}
	}
	return append(evs,
		event("content_block_stop", `{"type":"content_block_stop","index":0}`),
		event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, rp.output())),
		event("message_stop", `{"type":"message_stop"}`))
}

func anthropicJSON(w http.ResponseWriter, rp *reply) {
	content := `[{"type":"text","text":` + q(strings.Join(rp.words, "")) + `}]`
	stop := "end_turn"
	if rp.stop != "" {
		stop = rp.stop
	}
	if rp.tool != "" {
		content = fmt.Sprintf(`[{"type":"tool_use","id":%q,"name":%s,"input":%s}]`, anthropicToolID, q(rp.tool), strings.Join(rp.args, ""))
		stop = "tool_use"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"type":"message","role":"assistant","model":%s,"content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		anthropicID, q(rp.model), content, stop, rp.prompt, rp.written, rp.cached, rp.output())
}
