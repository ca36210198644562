package llm

import "strings"

// Response is a complete, non-streamed answer, built by a Collector from the event stream.
type Response struct {
	ID           string
	Model        string
	Content      []Block
	Stop         StopReason
	StopSequence string
	Usage        Usage
}

// Collector is a Sink that assembles the events into a Response. The zero value is ready to use.
type Collector struct {
	Response Response
	// parts holds what a block accumulates beyond its first text delta, by block index; it
	// grows only when a block needs it (a second text delta, a tool delta), so that a block
	// answered in one delta — a cache replay — costs no allocation beyond the content.
	parts []part
}

// part is one block's accumulation.
type part struct {
	args []byte           // tool input JSON
	text *strings.Builder // text: Text grows without being copied
}

// textBuf is the first buffer of a text block's builder.
const textBuf = 128

// part returns block i's accumulation, growing parts to hold it.
func (c *Collector) part(i int) *part {
	for len(c.parts) <= i {
		c.parts = append(c.parts, part{})
	}
	return &c.parts[i]
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
		if ev.Index < len(c.parts) {
			c.parts[ev.Index] = part{}
		}
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
		// allocations for a 100-token answer); a Builder's String shares its buffer.
		p := c.part(ev.Index)
		if p.text == nil {
			p.text = new(strings.Builder)
			// Short answers fit the first buffer; growing from empty took seven
			// allocations for 100 tokens.
			p.text.Grow(max(textBuf, 2*(len(blk.Text)+len(ev.Text))))
			p.text.WriteString(blk.Text)
		}
		p.text.WriteString(ev.Text)
		blk.Text = p.text.String()
	case EventToolDelta:
		if ev.Index < len(r.Content) {
			p := c.part(ev.Index)
			p.args = append(p.args, ev.Text...)
		}
	case EventBlockStop:
		if ev.Index < len(r.Content) && r.Content[ev.Index].Type == BlockToolUse {
			var in []byte
			if ev.Index < len(c.parts) {
				in = c.parts[ev.Index].args
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
