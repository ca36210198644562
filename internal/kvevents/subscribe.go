package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Handler receives one engine's events, from one goroutine at a time.
type Handler interface {
	// Reset says that what the handler knew of the engine's cache may be wrong: the
	// subscription (re)connected, or messages were lost (a gap in the sequence, or a sequence
	// that restarted with the engine). Events from then on describe the cache anew.
	Reset()
	// SetConnected reports whether the subscription is connected.
	SetConnected(bool)
	// Apply applies one batch, in the engine's order.
	Apply(b *Batch)
}

// SubscriberStatus is a subscription's counters.
type SubscriberStatus struct {
	Connected bool
	// Messages are the batches received and decoded; Malformed those that were not.
	Messages, Malformed uint64
	// Connects counts the connections made; Gaps the resets for a sequence out of order.
	Connects, Gaps uint64
	// TooLarge counts the connections closed because the publisher announced a frame larger
	// than the bound.
	TooLarge uint64
	// Next is the sequence number expected next on the current connection: the last one
	// received and applied, plus one; 0 before the first.
	Next uint64
	// Replays counts the gaps repaired from the engine's replay endpoint, ReplayFailures those
	// it could not repair (the index then started anew).
	Replays, ReplayFailures uint64
}

// Subscriber follows one engine's publisher: it connects (and reconnects, with backoff, while
// the engine is away), subscribes to its topic, decodes every message and hands the batches
// to its Handler. ZeroMQ reconnects hide a restart of the engine, so the subscriber owns the
// connection: a connection closed or a sequence out of order resets the handler.
type Subscriber struct {
	endpoint, topic string
	maxBytes        int
	h               Handler
	log             *slog.Logger
	cancel          context.CancelFunc
	done            chan struct{}

	connected                           atomic.Bool
	next                                atomic.Uint64
	messages, malformed, connects, gaps atomic.Uint64
	tooLarge                            atomic.Uint64
	warnOnce                            sync.Once

	hub    *hub   // the shared listener of a bound endpoint (bind.go); nil when connecting
	bound  bound  // a bound subscription's state
	replay string // the engine's replay endpoint (replay.go); "" for none

	replays, replayFailures atomic.Uint64
}

// Reconnection backoff bounds, and the bounds on a connection's setup.
const (
	minBackoff       = 50 * time.Millisecond
	maxBackoff       = 2 * time.Second
	dialTimeout      = 2 * time.Second
	handshakeTimeout = 5 * time.Second
)

// MinMaxBytes is the smallest bound Subscribe accepts on a message: a smaller one is raised to it.
const MinMaxBytes = 4096

// Subscribe starts following endpoint ("tcp://10.0.0.5:5557") for topic ("" for every topic)
// and returns at once; Close stops it. maxBytes bounds a message (its frames together; at least
// MinMaxBytes): a publisher that announces a larger frame has its connection closed, and the
// subscription reconnects after the usual backoff. log receives the connection changes (nil:
// discarded).
func Subscribe(endpoint, topic string, maxBytes int, h Handler, log *slog.Logger, opts ...Option) *Subscriber {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{endpoint: endpoint, topic: topic, maxBytes: max(maxBytes, MinMaxBytes), h: h, log: log,
		cancel: cancel, done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if Binds(endpoint) {
		subscribeBound(s)
		return s
	}
	go s.run(ctx)
	return s
}

// Close stops the subscription and waits for its goroutine.
func (s *Subscriber) Close() {
	s.cancel()
	<-s.done
	if s.hub != nil {
		s.hub.unfollow(s)
	}
}

// Status returns the subscription's counters.
func (s *Subscriber) Status() SubscriberStatus {
	return SubscriberStatus{Connected: s.connected.Load(), Messages: s.messages.Load(), Malformed: s.malformed.Load(),
		Connects: s.connects.Load(), Gaps: s.gaps.Load(), TooLarge: s.tooLarge.Load(), Next: s.next.Load(),
		Replays: s.replays.Load(), ReplayFailures: s.replayFailures.Load()}
}

func (s *Subscriber) run(ctx context.Context) {
	defer close(s.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if s.connected.Swap(false) {
			s.h.SetConnected(false)
			s.h.Reset()
			s.log.Warn("kv events: connection to the engine lost", "endpoint", s.endpoint, "err", err)
			if !errors.Is(err, ErrTooLarge) { // a publisher that keeps sending those waits longer each time
				backoff = minBackoff
			}
		} else {
			s.warnOnce.Do(func() {
				s.log.Warn("kv events: cannot connect to the engine; retrying", "endpoint", s.endpoint, "err", err)
			})
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// session is one connection: dial, subscribe, read until the connection ends.
func (s *Subscriber) session(ctx context.Context) error {
	addr, ok := strings.CutPrefix(s.endpoint, "tcp://")
	if !ok {
		return fmt.Errorf("kvevents: %q is not a tcp:// endpoint", s.endpoint)
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // unblocks a read when the subscription closes
	defer stop()
	z := newZMTPConn(c, s.maxBytes)
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := z.handshake(s.topic); err != nil {
		return err
	}
	_ = c.SetDeadline(time.Time{}) // an idle engine publishes nothing for as long as it likes
	s.connects.Add(1)
	s.next.Store(0)
	s.h.Reset() // what was published while away is lost
	s.connected.Store(true)
	s.h.SetConnected(true)
	s.log.Info("kv events: subscribed", "endpoint", s.endpoint, "topic", s.topic)
	dec := NewDecoder()
	var b Batch
	var last uint64
	first := true
	for {
		frames, err := z.recv()
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				s.tooLarge.Add(1)
			}
			return err
		}
		if len(frames) != 3 || len(frames[1]) != 8 || !bytes.HasPrefix(frames[0], []byte(s.topic)) {
			s.malformed.Add(1)
			continue
		}
		seq := binary.BigEndian.Uint64(frames[1])
		if !first && seq != last+1 {
			// Lost messages, or the engine restarted behind the same connection.
			s.gaps.Add(1)
			s.gap(last+1, seq)
		}
		first, last = false, seq
		s.apply(dec, &b, frames[2])
		s.next.Store(seq + 1)
	}
}

// apply decodes one message's payload into b and hands it to the handler.
func (s *Subscriber) apply(dec *Decoder, b *Batch, payload []byte) {
	if err := dec.Decode(payload, b); err != nil {
		s.malformed.Add(1)
		s.log.Debug("kv events: malformed batch", "endpoint", s.endpoint, "err", err)
		// The events are lost: what the handler knows may be wrong.
		s.h.Reset()
		return
	}
	s.messages.Add(1)
	s.h.Apply(b)
}

// gap handles the messages from seq from to seq to (excluded) that were lost: asked of the
// engine's replay endpoint and applied in order when it has them all, else the handler starts
// anew (what it knows may be wrong). A sequence that went back (the engine restarted) cannot be
// replayed.
func (s *Subscriber) gap(from, to uint64) {
	if s.replay != "" && to > from {
		payloads, err := s.replayed(from, to)
		if err == nil {
			s.replays.Add(1)
			dec := NewDecoder()
			var b Batch
			for _, p := range payloads {
				s.apply(dec, &b, p)
			}
			return
		}
		s.replayFailures.Add(1)
		s.log.Warn("kv events: a gap could not be replayed; the index starts anew", "endpoint", s.endpoint, "err", err)
	}
	s.h.Reset()
}
