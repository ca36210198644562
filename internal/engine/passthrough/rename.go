package passthrough

import (
	"bytes"
	"io"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Renamer gives the client its own model name in an engine's answer: it rewrites the value of
// the answer's "model" member, found by position (a scan of the JSON, not a search for the
// name), whatever the engine's spacing and whatever name it reports (a dated or aliased id,
// llama-server's own). The zero value, and NewRenamer(""), rename nothing.
//
// For a stream it learns, from the first event it scans, the event's bytes up to the end of
// the model value: a later event that starts with the same bytes (every chunk of vLLM, SGLang,
// Ollama, TGI and the hosted API does: same id, created and model) has its model member at the
// same place, since a JSON scanner's state depends only on the bytes it has read, and it is
// the last such member when no other key "model" follows: neither `"model"` nor a \u escape
// (the only way to spell that key otherwise) occurs after the prefix. Such events cost a prefix
// comparison and two byte searches instead of a scan.
type Renamer struct {
	repl   []byte // the client's model as a JSON string; nil renames nothing
	prefix []byte // learned: an event's bytes up to the end of its model value
	vs     int    // where the model value starts in prefix
	same   bool   // the learned value already is repl
	buf    []byte // the last renamed event
	spare  []byte // repl's buffer, kept by Reset
}

// NewRenamer returns a Renamer to model; "" renames nothing.
func NewRenamer(model string) Renamer {
	if model == "" {
		return Renamer{}
	}
	return Renamer{repl: jsontext.AppendString(nil, model)}
}

// Reset makes r rename to model as NewRenamer(model) would, keeping its buffers.
func (r *Renamer) Reset(model string) {
	r.prefix, r.vs, r.same = r.prefix[:0], 0, false
	if r.repl != nil {
		r.spare = r.repl[:0]
	}
	r.repl = nil
	if model != "" {
		r.repl = jsontext.AppendString(r.spare[:0], model)
	}
}

var (
	modelKey  = []byte(`"model"`)
	uEscape   = []byte(`\u`)
	dataField = []byte("data:")
)

// WriteJSON writes the JSON body to w with the value at body[s:e] (its "model" member's, found
// by the caller's scan; s < 0 when it has none) renamed, in up to three writes and no copy.
func (r *Renamer) WriteJSON(w io.Writer, body []byte, s, e int) error {
	if r.repl == nil || s < 0 || bytes.Equal(body[s:e], r.repl) {
		_, err := w.Write(body)
		return err
	}
	if _, err := w.Write(body[:s]); err != nil {
		return err
	}
	if _, err := w.Write(r.repl); err != nil {
		return err
	}
	_, err := w.Write(body[e:])
	return err
}

// Value returns what the model value v, found in an event by its caller, becomes for the
// client: the client's model as a JSON string, or nil when v stays as it is (nothing to
// rename, or v already is the client's). It is how EventAt renames an event whose data is one
// line, for an event recognised from its bytes (Shortcut).
func (r *Renamer) Value(v []byte) []byte {
	if r.repl == nil || bytes.Equal(v, r.repl) {
		return nil
	}
	return r.repl
}

// Event returns the SSE event raw, whose data payload is data (as sse.Reader returns them),
// with the top-level "model" member of data renamed; or raw itself when there is nothing to
// change (no model, data not a JSON object, the name already the client's). The renamed event
// is valid until the next call.
func (r *Renamer) Event(raw, data []byte) []byte {
	if r.repl == nil {
		return raw
	}
	if p := r.prefix; len(p) > 0 && bytes.HasPrefix(raw, p) &&
		!bytes.Contains(raw[len(p):], modelKey) && !bytes.Contains(raw[len(p):], uEscape) {
		if r.same {
			return raw
		}
		r.buf = append(append(append(r.buf[:0], raw[:r.vs]...), r.repl...), raw[len(p):]...)
		return r.buf
	}
	s, e, ok, err := jsontext.Field(data, "model")
	if err != nil || !ok {
		return raw
	}
	return r.event(raw, data, s, e, true)
}

// EventAt is Event for a model member the caller found itself, at data[s:e] (Anthropic's
// message_start carries it in its message).
func (r *Renamer) EventAt(raw, data []byte, s, e int) []byte {
	if r.repl == nil {
		return raw
	}
	return r.event(raw, data, s, e, false)
}

func (r *Renamer) event(raw, data []byte, s, e int, learn bool) []byte {
	same := bytes.Equal(data[s:e], r.repl)
	off := dataOffset(raw, data)
	if off < 0 {
		if same {
			return raw
		}
		r.buf = appendRenamed(r.buf[:0], raw, data, s, e, r.repl)
		return r.buf
	}
	if learn && data[s] == '"' {
		r.prefix = append(r.prefix[:0], raw[:off+e]...)
		r.vs, r.same = off+s, same
	}
	if same {
		return raw
	}
	r.buf = append(append(append(r.buf[:0], raw[:off+s]...), r.repl...), raw[off+e:]...)
	return r.buf
}

// dataOffset returns where data, the payload of the SSE event raw, starts in raw when it is
// the value of one data: line; -1 otherwise (several data: lines).
func dataOffset(raw, data []byte) int {
	if bytes.IndexByte(data, '\n') >= 0 {
		return -1
	}
	for i := 0; i < len(raw); {
		line := raw[i:]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j+1]
		}
		if bytes.HasPrefix(line, dataField) {
			o := i + 5
			if o < len(raw) && raw[o] == ' ' {
				o++
			}
			if bytes.HasPrefix(raw[o:], data) {
				return o
			}
			return -1
		}
		i += len(line)
	}
	return -1
}

// appendRenamed appends the SSE event raw to dst with its data: lines replaced by data with
// data[s:e] replaced by repl, one data: line per line of it; the other lines stay as they were.
func appendRenamed(dst, raw, data []byte, s, e int, repl []byte) []byte {
	nd := make([]byte, 0, len(data)-(e-s)+len(repl))
	nd = append(append(append(nd, data[:s]...), repl...), data[e:]...)
	wrote := false
	for len(raw) > 0 {
		line := raw
		if j := bytes.IndexByte(raw, '\n'); j >= 0 {
			line = raw[:j+1]
		}
		raw = raw[len(line):]
		if !bytes.HasPrefix(line, dataField) {
			dst = append(dst, line...)
			continue
		}
		if wrote {
			continue
		}
		wrote = true
		for _, l := range bytes.Split(nd, []byte("\n")) {
			dst = append(append(append(dst, "data: "...), l...), '\n')
		}
	}
	return dst
}
