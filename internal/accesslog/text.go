package accesslog

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// AppendText appends the JSON record line (one object, as Append writes it) to dst as one line
// of key=value pairs in the same order: strings are written bare when they hold no space, quote,
// '=' or control character and quoted (Go syntax) otherwise; numbers and booleans as they are;
// a list as its JSON. A line that is not a JSON object is written as one quoted msg.
func AppendText(dst, line []byte) []byte {
	start := len(dst)
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return appendRawMsg(dst[:start], line)
	}
	for dec.More() {
		k, err := dec.Token()
		key, ok := k.(string)
		if err != nil || !ok {
			return appendRawMsg(dst[:start], line)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return appendRawMsg(dst[:start], line)
		}
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, key...)
		dst = append(dst, '=')
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			dst = appendTextValue(dst, s)
		} else {
			dst = appendTextValue(dst, string(v))
		}
	}
	return append(dst, '\n')
}

// appendTextValue appends v bare, or quoted when it would not read back as one value or holds
// a character that is not printable (a C1 control, a line separator, invalid UTF-8), which
// the quoting escapes.
func appendTextValue(dst []byte, v string) []byte {
	if v != "" && utf8.ValidString(v) &&
		!strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || r == '=' || !strconv.IsPrint(r) }) {
		return append(dst, v...)
	}
	return strconv.AppendQuote(dst, v)
}

func appendRawMsg(dst, line []byte) []byte {
	dst = append(dst, "msg="...)
	dst = strconv.AppendQuote(dst, string(bytes.TrimRight(line, "\n")))
	return append(dst, '\n')
}
