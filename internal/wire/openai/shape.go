package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// Shape is how a Decoder compares the names of the objects of a value it skips. Where
// encoding/json read an object into a struct, names matching a field ignoring case were one
// field, read last-wins, while an engine reads them as two: there names are compared ignoring
// case. Elsewhere (a schema, tool arguments, metadata: JSON passed on as it is) names are
// compared exactly. An array's elements have the array's shape.
type Shape uint8

// The shapes of a Chat Completions request's values.
const (
	ShapeRaw Shape = iota
	shapeStruct
	shapeRequest
	shapeMessage
	shapePart
	shapeToolCall
	shapeTool
	shapeToolChoice
	shapeResponseFormat
)

// child returns the shape of the value of member k in an object of shape s.
func (s Shape) child(k string) Shape {
	switch s {
	case shapeRequest:
		switch {
		case Is(k, "messages"):
			return shapeMessage
		case Is(k, "tools"):
			return shapeTool
		case Is(k, "tool_choice"):
			return shapeToolChoice
		case Is(k, "response_format"):
			return shapeResponseFormat
		case Is(k, "stream_options"):
			return shapeStruct
		}
	case shapeMessage:
		switch {
		case Is(k, "content"):
			return shapePart
		case Is(k, "tool_calls"):
			return shapeToolCall
		}
	case shapePart, shapeToolCall, shapeToolChoice:
		if Is(k, "image_url") || Is(k, "function") {
			return shapeStruct
		}
	case shapeTool:
		if Is(k, "function") {
			return shapeStruct // its parameters are raw: a struct's members are
		}
	case shapeResponseFormat:
		if Is(k, "json_schema") {
			return shapeStruct // its schema is raw
		}
	}
	return ShapeRaw
}

// Skip reads and checks a value the decoder does not keep, of shape s, noting the first name
// given twice in it.
func (d *Decoder) Skip(s Shape) error {
	k := d.Peek()
	if k != jsontext.KindObject && k != jsontext.KindArray {
		return d.Scanner.Skip(d.Depth())
	}
	if s == ShapeRaw || !d.Fold {
		return d.skipUnique()
	}
	if d.Depth() >= d.MaxDepth {
		return d.ErrAt(d.Pos, "nesting too deep")
	}
	d.Pos++
	if k == jsontext.KindObject {
		return d.Members(nil, func(k string, _ int) error { return d.Skip(s.child(k)) })
	}
	return d.Elems(func() error { return d.Skip(s) })
}

// skipUnique skips the value at the position, noting the first name given twice in any of its
// objects, compared exactly.
func (d *Decoder) skipUnique() error {
	start := d.Pos
	err := d.SkipUnique(d.Depth())
	de, ok := err.(*jsontext.DuplicateKeyError)
	if !ok {
		return err
	}
	if d.dup == nil {
		d.dup = append(d.Segments(make([]PathSeg, 0, d.Depth()+len(de.Path))), de.Path...)
	}
	d.Pos = start // the rest of the value may hold a worse error: read it again
	return d.Scanner.Skip(d.Depth())
}
