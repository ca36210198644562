package llm

import "unsafe"

// Response is a complete, non-streamed answer, built by a Collector from the event stream.
type Response struct {
	ID           string
	Model        string
	Content      []Block
	Stop         StopReason
	StopSequence string
	Usage        Usage
}

// Collector is a Sink that assembles the events into a Response. The zero value is ready to use;
// a Response.Content set before the first event, empty, is the storage the blocks are appended
// to. Like a strings.Builder, a Collector must not be copied once it has received an event:
// the copies would append to the same buffers.
type Collector struct {
	Response Response
	// parts holds what blocks 0 and 1 accumulate beyond their first text delta, more what
	// later blocks do: an answer of one or two blocks needs no slice of parts.
	parts [2]part
	more  []part
}

// part is one block's accumulation.
type part struct {
	args []byte // tool input JSON
	// text is a text block's text once a second delta came: Text is a string of its bytes,
	// which are only ever appended to (Text grows without being copied, as in a
	// strings.Builder).
	text []byte
}

// textBuf is the first buffer of a text block's text.
const textBuf = 128

// part returns block i's accumulation, growing more to hold it.
func (c *Collector) part(i int) *part {
	if i < len(c.parts) {
		return &c.parts[i]
	}
	i -= len(c.parts)
	for len(c.more) <= i {
		c.more = append(c.more, part{})
	}
	return &c.more[i]
}

// resetPart drops what block i accumulated, if anything.
func (c *Collector) resetPart(i int) {
	switch {
	case i < len(c.parts):
		c.parts[i] = part{}
	case i-len(c.parts) < len(c.more):
		c.more[i-len(c.parts)] = part{}
	}
}

// Send implements Sink.
func (c *Collector) Send(ev *Event) error {
	r := &c.Response
	switch ev.Kind {
	case EventStart:
		r.ID, r.Model, r.Usage = ev.ID, ev.Model, ev.Usage
	case EventBlockStart:
		for len(r.Content) <= ev.Index {
			r.Content = append(r.Content, Block{})
		}
		r.Content[ev.Index] = Block{Type: ev.Block, ID: ev.ID, Name: ev.Name}
		c.resetPart(ev.Index)
	case EventTextDelta:
		if ev.Index >= len(r.Content) {
			break
		}
		blk := &r.Content[ev.Index]
		if blk.Text == "" {
			// The first delta's text is shared, not copied: strings do not change.
			blk.Text = ev.Text
			break
		}
		// Text += ev.Text copied the whole text at every delta (quadratic: 25 KB and 98
		// allocations for a 100-token answer); a string of the buffer shares it.
		p := c.part(ev.Index)
		if p.text == nil {
			// Short answers fit the first buffer; growing from empty took seven
			// allocations for 100 tokens.
			p.text = make([]byte, 0, max(textBuf, 2*(len(blk.Text)+len(ev.Text))))
			p.text = append(p.text, blk.Text...)
		}
		// Bytes under an earlier Text are never written again: append writes past them, or
		// into a new array.
		p.text = append(p.text, ev.Text...)
		blk.Text = unsafe.String(unsafe.SliceData(p.text), len(p.text))
	case EventToolDelta:
		if ev.Index < len(r.Content) {
			p := c.part(ev.Index)
			p.args = append(p.args, ev.Text...)
		}
	case EventBlockStop:
		if ev.Index < len(r.Content) && r.Content[ev.Index].Type == BlockToolUse {
			var in []byte
			if ev.Index < len(c.parts)+len(c.more) {
				in = c.part(ev.Index).args
			}
			if len(in) == 0 {
				in = []byte("{}")
			}
			r.Content[ev.Index].Input = in
		}
	case EventStop:
		r.Stop, r.StopSequence = ev.Stop, ev.StopSequence
		r.Usage = ev.Usage
	}
	return nil
}

// Flush implements Sink; a Collector has nothing to flush.
func (c *Collector) Flush() error { return nil }
