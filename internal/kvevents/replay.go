package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// vLLM's replay endpoint: a ROUTER socket next to the publisher that answers a request for
// the batches from a sequence number on with every batch it still buffers from there, each as
// [sequence, payload], then [endSeq, ""]. A subscriber that finds a gap in the sequence asks
// for the batches it missed and applies them in order, instead of emptying its index; when the
// replay does not cover the gap (the engine no longer buffers the first batch missed, or the
// endpoint does not answer) it starts anew as before.

// endSeq ends a replay: -1 as a signed 64-bit big-endian integer.
var endSeq = bytes.Repeat([]byte{0xFF}, 8)

// replayTimeout bounds one replay, so that an engine that does not answer stalls its
// subscription only briefly.
const replayTimeout = 2 * time.Second

// Option configures a subscription.
type Option func(*Subscriber)

// WithReplay sets the engine's replay endpoint ("tcp://10.0.0.5:5558"), asked for the batches
// missed after a gap in the sequence; "" leaves replays off.
func WithReplay(endpoint string) Option { return func(s *Subscriber) { s.replay = endpoint } }

// replayed returns the payloads of the batches [from, to) from the engine's replay endpoint,
// in order, or an error when they cannot all be had.
func (s *Subscriber) replayed(from, to uint64) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
	defer cancel()
	sock := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(1))
	defer sock.Close()
	if err := sock.Dial(s.replay); err != nil {
		return nil, fmt.Errorf("kvevents: replay %s: %w", s.replay, err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if err := sock.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return nil, fmt.Errorf("kvevents: replay %s: %w", s.replay, err)
	}
	var out [][]byte
	next := from
	for {
		msg, err := sock.Recv()
		if err != nil {
			return nil, fmt.Errorf("kvevents: replay %s: %w", s.replay, err)
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the delimiter
		}
		if len(f) != 2 || len(f[0]) != 8 {
			return nil, errors.New("kvevents: replay: a malformed answer")
		}
		if bytes.Equal(f[0], endSeq) {
			break
		}
		seq := binary.BigEndian.Uint64(f[0])
		switch {
		case seq < next:
			continue
		case seq > next:
			return nil, fmt.Errorf("kvevents: replay: batch %d is no longer buffered", next)
		}
		if seq < to {
			out = append(out, append([]byte(nil), f[1]...))
		}
		next++
	}
	if next < to {
		return nil, fmt.Errorf("kvevents: replay: batches %d to %d not answered", next, to-1)
	}
	return out, nil
}

// ReplayServer answers replay requests for a Publisher's last batches, as vLLM's replay
// endpoint does.
type ReplayServer struct {
	sock     zmq4.Socket
	endpoint string

	mu    sync.Mutex
	first uint64   // the sequence number of buf[0]
	buf   [][]byte // the last batches, oldest first
	max   int
	done  chan struct{}
}

// NewReplayServer listens on endpoint and keeps the last n batches given to Keep.
func NewReplayServer(endpoint string, n int) (*ReplayServer, error) {
	sock := zmq4.NewRouter(context.Background())
	if err := sock.Listen(endpoint); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: replay on %s: %w", endpoint, err)
	}
	r := &ReplayServer{sock: sock, endpoint: endpoint, max: max(n, 1), done: make(chan struct{})}
	if a := sock.Addr(); a != nil {
		r.endpoint = "tcp://" + a.String()
	}
	go r.serve()
	return r, nil
}

// Endpoint returns the endpoint the server listens on, its port resolved.
func (r *ReplayServer) Endpoint() string { return r.endpoint }

// Keep buffers batch seq (copied), forgetting the oldest beyond the bound.
func (r *ReplayServer) Keep(seq uint64, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == 0 {
		r.first = seq
	}
	r.buf = append(r.buf, append([]byte(nil), payload...))
	if len(r.buf) > r.max {
		r.buf = r.buf[1:]
		r.first++
	}
}

// Close stops the server.
func (r *ReplayServer) Close() error {
	err := r.sock.Close()
	<-r.done
	return err
}

func (r *ReplayServer) serve() {
	defer close(r.done)
	for {
		msg, err := r.sock.Recv()
		if err != nil {
			return
		}
		f := msg.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			continue
		}
		id := f[0]
		start := binary.BigEndian.Uint64(f[len(f)-1])
		r.mu.Lock()
		var batches [][]byte
		from := r.first
		if start >= r.first {
			batches = append(batches, r.buf[min(start-r.first, uint64(len(r.buf))):]...)
			from = start
		} else {
			batches = append(batches, r.buf...)
		}
		r.mu.Unlock()
		for i, b := range batches {
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], from+uint64(i))
			if r.sock.SendMulti(zmq4.NewMsgFrom(id, []byte{}, s[:], b)) != nil {
				return
			}
		}
		if r.sock.SendMulti(zmq4.NewMsgFrom(id, []byte{}, endSeq, []byte{})) != nil {
			return
		}
	}
}
