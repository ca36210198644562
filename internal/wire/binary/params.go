package binary

// The version-2 request's parameters: what follows the messages, tag by tag.

import (
	ebin "encoding/binary"
	"fmt"
	"math"

	"github.com/layer0ai/layer0/internal/llm"
)

// params reads the version-2 parameters up to the end of the body.
func (d *reqDecoder) params(req *llm.Request, mode *Mode) error {
	var seen uint64
	for d.off < len(d.b) {
		tagAt := d.off
		t, _ := d.u8("param tag")
		tag := paramTag(t)
		lenAt := d.off
		n, err := d.uvarint("param length", math.MaxInt32)
		if err != nil {
			return err
		}
		valAt := d.off
		if int(n) > len(d.b)-d.off {
			return d.fail(lenAt, "param length", "%d exceeds the body (%d bytes left)", n, len(d.b)-d.off)
		}
		d.end = d.off + int(n)
		name := tag.String()
		if tag <= paramOutput && tag != paramSystem && tag != paramStopSequence && tag != paramTool {
			if seen&(1<<tag) != 0 {
				return d.fail(tagAt, name, "given twice")
			}
			seen |= 1 << tag
		}
		switch tag {
		case paramSystem:
			s, err := d.text(int(n), name)
			if err != nil {
				return err
			}
			if s != "" { // an empty system block says nothing, as in version 1
				req.System = append(req.System, llm.Block{Type: llm.BlockText, Text: s})
			}
		case paramTemperature, paramTopP:
			if n != 8 {
				return d.fail(valAt, name, "length %d, want 8 (float64)", n)
			}
			f := math.Float64frombits(ebin.BigEndian.Uint64(d.b[d.off:]))
			d.off += 8
			if !(f >= 0 && f <= 1) { // llm.MaxTemperature and top_p's bound; NaN fails too
				return d.fail(valAt, name, "%v out of range (0 to 1)", f)
			}
			if tag == paramTemperature {
				req.Temperature = &f
			} else {
				req.TopP = &f
			}
		case paramTopK:
			k, err := d.uvarint(name, math.MaxInt32)
			if err != nil {
				return err
			}
			kk := int(k)
			req.TopK = &kk
		case paramStopSequence:
			s, err := d.text(int(n), name)
			if err != nil {
				return err
			}
			if s == "" {
				return d.fail(valAt, name, "empty")
			}
			req.StopSequences = append(req.StopSequences, s)
		case paramTool:
			if err := d.tool(req, valAt); err != nil {
				return err
			}
		case paramToolChoice:
			if err := d.toolChoice(&req.ToolChoice); err != nil {
				return err
			}
		case paramUserID:
			if req.UserID, err = d.text(int(n), name); err != nil {
				return err
			}
		case paramOutput:
			o, err := d.u8(name)
			if err != nil {
				return err
			}
			if o > 1 {
				return d.fail(valAt, name, "%d: want 0 (token IDs) or 1 (text)", o)
			}
			mode.Text = o == 1
		default:
			if tag < paramOptionalMin || tag > paramOptionalMax {
				return d.fail(tagAt, "param tag", "unknown tag 0x%02x (tags 0x40-0x7f are optional and skipped)", t)
			}
			d.off = d.end
		}
		if d.off != d.end {
			return d.fail(d.off, name, "%d unread bytes at the end of the param value", d.end-d.off)
		}
		d.end = 0
	}
	return d.namedToolExists(req)
}

// tool reads a tool parameter, whose value starts at valAt, and appends it to req.Tools: a
// valid name no other tool has, a description and an input schema.
func (d *reqDecoder) tool(req *llm.Request, valAt int) error {
	d.idx[0] = len(req.Tools)
	var tl llm.Tool
	var err error
	if tl.Name, err = d.str("tools[].name", 255); err != nil {
		return err
	}
	if !llm.ValidToolName(tl.Name) {
		return d.fail(valAt, "tools[].name", "must match ^[a-zA-Z0-9_-]{1,%d}$, got %.64q", llm.MaxToolName, tl.Name)
	}
	for j := range req.Tools {
		if req.Tools[j].Name == tl.Name {
			return d.fail(valAt, "tools[].name", "tool names must be unique; %q is also tools[%d].name", tl.Name, j)
		}
	}
	if tl.Description, err = d.str("tools[].description", math.MaxInt32); err != nil {
		return err
	}
	if tl.InputSchema, err = d.jsonObject("tools[].input_schema"); err != nil {
		return err
	}
	req.Tools = append(req.Tools, tl)
	d.idx[0] = -1
	return nil
}

// toolChoice reads the tool_choice parameter into tc: its type, the tool's name for a named
// choice, and whether parallel tool use is disabled.
func (d *reqDecoder) toolChoice(tc *llm.ToolChoice) error {
	at := d.off
	ct, err := d.u8("tool_choice.type")
	if err != nil {
		return err
	}
	if ct > int(llm.ToolNone) {
		return d.fail(at, "tool_choice.type", "%d: want 0 (auto), 1 (any), 2 (tool) or 3 (none)", ct)
	}
	tc.Type = llm.ToolChoiceType(ct)
	if tc.Type == llm.ToolNamed {
		if tc.Name, err = d.nonEmpty("tool_choice.name", 255); err != nil {
			return err
		}
	}
	at = d.off
	dp, err := d.u8("tool_choice.disable_parallel_tool_use")
	if err != nil {
		return err
	}
	if dp > 1 {
		return d.fail(at, "tool_choice.disable_parallel_tool_use", "%d: want 0 or 1", dp)
	}
	tc.DisableParallelToolUse = dp == 1
	return nil
}

// namedToolExists checks, once every parameter is read, that a tool_choice naming a tool names
// one of the request's tools.
func (d *reqDecoder) namedToolExists(req *llm.Request) error {
	tc := &req.ToolChoice
	if tc.Type != llm.ToolNamed {
		return nil
	}
	for i := range req.Tools {
		if req.Tools[i].Name == tc.Name {
			return nil
		}
	}
	if len(req.Tools) == 0 {
		return d.fail(len(d.b), "tool_choice.name", "names tool %q but the request has no tools", tc.Name)
	}
	return d.fail(len(d.b), "tool_choice.name", "no tool named %q in tools", tc.Name)
}

// nonEmpty reads a str that must not be empty.
func (d *reqDecoder) nonEmpty(field string, maxLen int) (string, error) {
	at := d.off
	s, err := d.str(field, maxLen)
	if err == nil && s == "" {
		err = d.fail(at, field, "empty")
	}
	return s, err
}

// String names the parameter as docs/protocol.md and the JSON API do.
func (t paramTag) String() string {
	switch t {
	case paramSystem:
		return "system"
	case paramTemperature:
		return "temperature"
	case paramTopP:
		return "top_p"
	case paramTopK:
		return "top_k"
	case paramStopSequence:
		return "stop_sequences"
	case paramTool:
		return "tools"
	case paramToolChoice:
		return "tool_choice"
	case paramUserID:
		return "metadata.user_id"
	case paramOutput:
		return "output"
	}
	return fmt.Sprintf("param 0x%02x", uint8(t))
}
