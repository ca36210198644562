package sim

import (
	"encoding/json"

	"github.com/layer0ai/layer0/internal/llm"
)

// defaultJSONSchema is the shape of the simulated model's answer in JSON mode without a
// schema: one object with a text answer.
var defaultJSONSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string","minLength":24}},"required":["answer"]}`)

// planJSON plans a JSON answer, as a model does in JSON mode (response_format json_object or
// json_schema, the json_mode directive): one JSON value following the request's schema (the
// subset the tool input generator follows), or an object with an "answer" string when there is
// none. When even the smallest valid value does not fit in limit tokens the answer is cut there
// (stop reason max_tokens), as a real model's is; stop sequences cut it as they cut text.
func (r *run) planJSON(req *llm.Request, limit int) {
	schema := req.ResponseFormat.Schema
	if req.ResponseFormat.Type != llm.ResponseJSONSchema || len(schema) == 0 {
		schema = defaultJSONSchema
	}
	g := inputGen{r: rng(r.seed ^ 0x9e3779b97f4a7c15)}
	for _, minimal := range []bool{false, true} {
		g.minimal = minimal
		r.json = g.document(r.json[:0], schema)
		r.out = r.e.tok.Encode(r.out[:0], string(r.json))
		if len(r.out) <= limit {
			break
		}
	}
	src := string(r.json)
	if len(r.out) > limit {
		r.out = r.out[:limit]
		r.stop = llm.StopMaxTokens
		r.text = r.e.tok.Decode(r.text[:0], r.out)
		src = truncate(src, r.text)
	}
	r.addText(src, req.StopSequences)
}

// document appends one JSON value following the schema raw, whatever its root type.
func (g *inputGen) document(dst []byte, raw json.RawMessage) []byte {
	g.left, g.root, g.refs = maxValues, raw, nil
	return g.value(dst, raw, 0)
}
