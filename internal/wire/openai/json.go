package openai

import (
	"strconv"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// appendString appends s as a JSON string (see jsontext).
func appendString(dst []byte, s string) []byte { return jsontext.AppendString(dst, s) }

// appendEscaped appends the inside of a JSON string for s, without the quotes.
func appendEscaped(dst []byte, s string) []byte { return jsontext.AppendEscaped(dst, s) }

// appendRaw appends raw JSON, or def when raw is empty.
func appendRaw(dst []byte, raw []byte, def string) []byte {
	if len(raw) == 0 {
		return append(dst, def...)
	}
	return append(dst, raw...)
}

// appendFloat appends f in the shortest form that round-trips.
func appendFloat(dst []byte, f float64) []byte {
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// appendInt appends n in decimal.
func appendInt(dst []byte, n int64) []byte {
	return strconv.AppendInt(dst, n, 10)
}
