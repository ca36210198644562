package passthrough

import "github.com/layer0ai/layer0/internal/engine"

// MaxHeldBytes bounds the bytes of prelude an Out holds back (engine.MaxHeldEvents its events):
// a stream with more prelude than that before its first content has it released (and the
// attempt committed), as the pipeline does with the canonical events of the other engines.
const MaxHeldBytes = 64 << 10

// maxQueued bounds the bytes an Out queues (Queue) before it writes them.
const maxQueued = 32 << 10

// Out wraps the client's writer for a pass-through response: it counts bytes and flushes the
// writer (the client's writer sets its own headers). It also holds a stream's prelude (Hold)
// until the first event with content is written, so that nothing reaches the client, not even
// the status line, from an attempt that fails before content; and it coalesces the events that
// arrived together (Queue) into one write, made when Flush is called or the queue is full.
type Out struct {
	W           Writer
	ContentType string // the engine's answer's media type, as its response said
	N           int64
	// Held is where the prelude is kept until the next Write. Give it a reusable buffer's [:0]
	// and holding allocates nothing; nil allocates on the first Hold.
	Held []byte
	// Queued is where Queue keeps events until they are written; as with Held, a reusable
	// buffer's [:0] makes queueing allocate nothing.
	Queued  []byte
	nheld   int
	started bool
}

// Hold keeps a copy of the prelude event p, to be written before the next Write. It reports
// false, holding nothing, once anything was written or queued or when the bounds are reached;
// the caller then writes p.
func (o *Out) Hold(p []byte) bool {
	if o.Started() || o.nheld >= engine.MaxHeldEvents || len(o.Held)+len(p) > MaxHeldBytes {
		return false
	}
	o.Held = append(o.Held, p...)
	o.nheld++
	return true
}

// Release writes the held prelude and the queued events, if any: for a stream that ends with
// nothing but prelude, or ends after events that are still queued.
func (o *Out) Release() error {
	if len(o.Held) == 0 && len(o.Queued) == 0 {
		return nil
	}
	_, err := o.Write(nil)
	return err
}

// Queue adds p to the events written together at the next Flush (or Write, or Release): the
// events of one burst reach the client in one write. p is copied; a p too large to queue is
// written at once, after what was queued.
func (o *Out) Queue(p []byte) error {
	if len(o.Queued)+len(p) > maxQueued {
		_, err := o.Write(p)
		return err
	}
	o.Queued = append(o.Queued, p...)
	return nil
}

// Write implements io.Writer. The held prelude goes first, then the queued events.
func (o *Out) Write(p []byte) (int, error) {
	if len(o.Held) > 0 {
		h := o.Held
		o.Held, o.nheld = o.Held[:0], 0
		if _, err := o.write(h); err != nil {
			return 0, err
		}
	}
	if len(o.Queued) > 0 {
		q := o.Queued
		o.Queued = o.Queued[:0]
		if _, err := o.write(q); err != nil {
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	return o.write(p)
}

func (o *Out) write(p []byte) (int, error) {
	o.started = true
	n, err := o.W.Write(p)
	o.N += int64(n)
	return n, err
}

// Started reports whether anything was written or queued (a held prelude is not).
func (o *Out) Started() bool { return o.started || len(o.Queued) > 0 }

// Flush writes the queued events and flushes the writer. Before anything was written it does
// nothing: flushing would send the status line.
func (o *Out) Flush() error {
	if len(o.Queued) > 0 {
		if _, err := o.Write(nil); err != nil {
			return err
		}
	}
	if !o.started {
		return nil
	}
	return o.W.Flush()
}
