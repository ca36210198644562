// Package anthropic is the Anthropic Messages API wire codec, both directions, with no policy and
// no HTTP: it decodes request bodies into llm.Request and encodes responses, SSE streams, errors
// and model lists for the server, and it encodes requests and parses responses and streams for
// the engine that calls the hosted API.
//
// Design: JSON is read by jsontext.Scanner over one string copy of the body (strings
// in the decoded Request are substrings of that copy, so a typical request costs a handful of
// allocations), validated completely (syntax, UTF-8, types, ranges, unknown fields) with error
// messages that name the offending field by its path, as the real API does. JSON is written by
// append functions into caller-owned buffers with hand-written string escaping, and the SSE
// encoder is an llm.Sink that buffers events and writes them on Flush, allocating nothing per
// delta.
//
// The stream this package writes (and reads) is, as the Anthropic API sends it:
//
//	message_start        {"type":"message_start","message":{… "content":[], "usage":{…}}}
//	content_block_start  {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}
//	ping                 {"type":"ping"}                      once, after the first block start
//	content_block_delta  {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"…"}}
//	                     … or {"type":"input_json_delta","partial_json":"…"} for tool_use blocks
//	content_block_stop   {"type":"content_block_stop","index":0}
//	message_delta        {"type":"message_delta","delta":{"stop_reason":…,"stop_sequence":…},"usage":{…}}
//	message_stop         {"type":"message_stop"}
//
// and, when a failure happens after the stream began, event: error with
// {"type":"error","error":{"type":…,"message":…}}.
package anthropic

// Limits applied while decoding. They bound work and memory on hostile input; the server limits
// the body size before any of this runs.
const (
	// maxDepth bounds JSON nesting (tool schemas and tool inputs are the deep parts).
	maxDepth = 256
	// maxInt32 is the largest integer accepted for max_tokens and top_k.
	maxInt32 = 1<<31 - 1
)
