// Package ids makes the identifiers layer0 hands out: request ids (L0-…), message ids (msg_…),
// completion ids (chatcmpl-…) and tool-call ids. They are random, URL-safe and cheap: one call to
// the runtime's per-thread generator, no locks, one allocation for the string.
package ids

import (
	"math/rand/v2"
)

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// appendRandom appends n base-62 characters drawn from the runtime's random source.
func appendRandom(dst []byte, n int) []byte {
	var x uint64
	left := 0
	for range n {
		if left == 0 {
			x, left = rand.Uint64(), 10 // 62^10 < 2^64: ten digits per draw
		}
		dst = append(dst, alphabet[x%62])
		x /= 62
		left--
	}
	return dst
}

func make1(prefix string, n int) string {
	var buf [48]byte
	b := append(buf[:0], prefix...)
	return string(appendRandom(b, n))
}

// Request returns a new request id, "L0-" and 20 base-62 characters.
func Request() string { return make1("L0-", 20) }

// AppendRequest appends a new request id to dst (Request), for a caller that keeps the id in
// memory of its own.
func AppendRequest(dst []byte) []byte { return appendRandom(append(dst, "L0-"...), 20) }

// AppendMessage appends a new message id to dst (Message).
func AppendMessage(dst []byte) []byte { return appendRandom(append(dst, "msg_"...), 24) }

// AppendCompletion appends a new completion id to dst (Completion).
func AppendCompletion(dst []byte) []byte { return appendRandom(append(dst, "chatcmpl-"...), 24) }

// Message returns a new Anthropic message id, "msg_" and 24 base-62 characters.
func Message() string { return make1("msg_", 24) }

// Completion returns a new OpenAI completion id, "chatcmpl-" and 24 base-62 characters.
func Completion() string { return make1("chatcmpl-", 24) }

// ToolUse returns a new Anthropic tool-use id, "toolu_" and 24 base-62 characters.
func ToolUse() string { return make1("toolu_", 24) }

// ToolCall returns a new OpenAI tool-call id, "call_" and 24 base-62 characters.
func ToolCall() string { return make1("call_", 24) }

// Response returns a new OpenAI Responses API response id, "resp_" and 24 base-62 characters.
func Response() string { return make1("resp_", 24) }

// FunctionCall returns a new Responses API function call item id, "fc_" and 24 base-62
// characters.
func FunctionCall() string { return make1("fc_", 24) }
