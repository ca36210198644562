package openai

// The tools of a Chat Completions request: their declarations and tool_choice, the pairing of
// tool calls with tool messages, and the arguments of a call.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

func decodeTools(r *llm.Request, tools []chatTool) error {
	for i, t := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return apierr.Invalid(p+".type", "must be \"function\", got %q", t.Type)
		}
		if !t.HasFunction {
			return apierr.Invalid(p+".function.name", "required")
		}
		tool, err := t.Function.Tool(p + ".function")
		if err != nil {
			return err
		}
		for j := range r.Tools {
			if r.Tools[j].Name == tool.Name {
				return apierr.Invalid(p+".function.name", "tool names must be unique; %q is also tools[%d].function.name", tool.Name, j)
			}
		}
		r.Tools = append(r.Tools, tool)
	}
	return nil
}

func decodeToolChoice(r *llm.Request, l *Lenient[toolChoiceJSON], parallel Opt[bool]) error {
	if parallel.OK && !parallel.V {
		r.ToolChoice.DisableParallelToolUse = true
	}
	if !l.Given {
		return nil
	}
	if l.IsStr {
		return toolChoiceMode(r, l.Str, "a function")
	}
	if l.Bad {
		return apierr.Invalid("tool_choice", "must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}")
	}
	obj := &l.V
	if obj.Type != "function" {
		return apierr.Invalid("tool_choice.type", "must be \"function\", got %q", obj.Type)
	}
	return namedToolChoice(r, "tool_choice.function.name", obj.Name, "tool")
}

// toolChoiceMode sets r's tool choice from a tool_choice string: "auto", "required" or "none";
// any other is an error saying that the field may also be other.
func toolChoiceMode(r *llm.Request, s, other string) error {
	switch s {
	case "auto":
		r.ToolChoice.Type = llm.ToolAuto
	case "required":
		r.ToolChoice.Type = llm.ToolAny
	case "none":
		r.ToolChoice.Type = llm.ToolNone
	default:
		return apierr.Invalid("tool_choice", "must be \"none\", \"auto\", \"required\" or %s, got %q", other, s)
	}
	return nil
}

// namedToolChoice sets r's tool choice to the tool named name, the field at p, which must be
// one of r.Tools; what is the word for a tool in the error.
func namedToolChoice(r *llm.Request, p, name, what string) error {
	if name == "" {
		return apierr.Invalid(p, "required")
	}
	for _, t := range r.Tools {
		if t.Name == name {
			r.ToolChoice.Type, r.ToolChoice.Name = llm.ToolNamed, name
			return nil
		}
	}
	return apierr.Invalid(p, "no %s named %q in tools", what, name)
}

// functionName checks a function tool's name, the field at p: given, and a valid tool name.
func functionName(p, name string) error {
	if name == "" {
		return apierr.Invalid(p, "required")
	}
	if !llm.ValidToolName(name) {
		return apierr.Invalid(p, "must match ^[a-zA-Z0-9_-]{1,%d}$, got %.64q", llm.MaxToolName, name)
	}
	return nil
}

// checkToolPairs checks that tool calls and tool messages pair up as the OpenAI API requires:
// an assistant message with tool_calls is followed by one tool message per call id (system and
// developer messages may sit between them: they join the system prompt), and every tool message
// answers a call of the assistant message before that run, once. Errors name the field as
// OpenAI spells it (messages[3].tool_call_id). The messages have been decoded already, so every
// tool message has a tool_call_id and every call an id.
func checkToolPairs(msgs []chatMessage) error {
	pending := -1               // index of the assistant message whose calls are being answered
	var answered map[string]int // call id -> index of the tool message answering it
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case "system", "developer":
			continue
		case "tool":
			id := m.ToolCallID.V
			if pending < 0 || !hasCall(msgs[pending].ToolCalls, id) {
				return apierr.Invalid(fmt.Sprintf("messages[%d].tool_call_id", i),
					"messages with role 'tool' must be a response to a preceding message with 'tool_calls'; "+
						"no tool call of that message has id %.64q", id)
			}
			if j, dup := answered[id]; dup {
				return apierr.Invalid(fmt.Sprintf("messages[%d].tool_call_id", i),
					"duplicate tool message for tool_call_id %.64q: messages[%d] already responds to it", id, j)
			}
			answered[id] = i
			continue
		}
		if pending >= 0 {
			if err := checkAnswered(msgs, pending, answered); err != nil {
				return err
			}
			pending = -1
		}
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			pending = i
			answered = make(map[string]int, len(m.ToolCalls))
		}
	}
	if pending >= 0 {
		return checkAnswered(msgs, pending, answered)
	}
	return nil
}

// maxListed is the most call ids an error message lists.
const maxListed = 16

func hasCall(calls []chatToolCall, id string) bool {
	for j := range calls {
		if calls[j].ID == id {
			return true
		}
	}
	return false
}

// checkAnswered checks that every tool call of assistant message i has a tool message in
// answered; the error names the first call without one and lists them all.
func checkAnswered(msgs []chatMessage, i int, answered map[string]int) error {
	first := -1
	var missing []string
	for j, tc := range msgs[i].ToolCalls {
		if _, ok := answered[tc.ID]; !ok {
			if first < 0 {
				first = j
			}
			missing = append(missing, fmt.Sprintf("%.64s", tc.ID))
		}
	}
	if first < 0 {
		return nil
	}
	if more := len(missing) - maxListed; more > 0 {
		missing = append(missing[:maxListed], fmt.Sprintf("and %d more", more))
	}
	return apierr.Invalid(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, first),
		"an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "+
			"The following tool_call_ids did not have response messages: %s", strings.Join(missing, ", "))
}

// toolInput validates function arguments, the field at p: a JSON object in which no object
// repeats a name, or empty for no arguments.
func toolInput(p, args string) (json.RawMessage, error) {
	a := strings.TrimSpace(args)
	if len(a) == 0 {
		return json.RawMessage("{}"), nil
	}
	if a[0] != '{' || syntaxError(a) != nil {
		return nil, apierr.Invalid(p, "must be a JSON object encoded as a string")
	}
	s := jsontext.Scanner{Text: a, MaxDepth: maxNesting}
	if de, ok := s.SkipUnique(0).(*jsontext.DuplicateKeyError); ok {
		return nil, apierr.Invalid(p+"."+pathString(de.Path), "%s", dupMessage)
	}
	return json.RawMessage(a), nil
}

// Tool checks the function f declares, the field at p, and returns it as a tool: a valid name,
// and parameters a JSON Schema object (an empty one when not given).
func (f *FuncDecl) Tool(p string) (llm.Tool, error) {
	if err := functionName(p+".name", f.Name); err != nil {
		return llm.Tool{}, err
	}
	schema := json.RawMessage(`{"type":"object","properties":{}}`)
	if f.Parameters != "" {
		if f.Parameters[0] != '{' {
			return llm.Tool{}, apierr.Invalid(p+".parameters", "must be a JSON Schema object")
		}
		schema = json.RawMessage(f.Parameters)
	}
	return llm.Tool{Name: f.Name, Description: f.Description, InputSchema: schema}, nil
}
