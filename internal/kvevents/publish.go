package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Publisher publishes event batches on a ZeroMQ PUB socket as vLLM's publisher does:
// [topic, sequence, payload] per batch, the sequence counting from 0. Publish only queues the
// batch (up to a bound; beyond it batches are dropped, as an engine's publisher drops them when
// its queue is full); one goroutine sends. It is safe for concurrent use; batches are sent in
// the order Publish was called.
type Publisher struct {
	sock     zmq4.Socket
	endpoint string
	topic    []byte
	q        chan []byte
	done     chan struct{}

	published atomic.Uint64 // batches accepted by Publish

	mu      sync.Mutex
	closed  bool
	dropped int64
}

// publishQueue is how many batches may wait to be sent.
const publishQueue = 4096

// NewPublisher listens on endpoint ("tcp://127.0.0.1:5557") and returns a Publisher of topic.
func NewPublisher(endpoint, topic string) (*Publisher, error) {
	return newPublisher(endpoint, topic, false)
}

// DialPublisher connects to a subscriber bound at endpoint (llm-d's topology: the engines
// connect to the router) and returns a Publisher of topic. The socket reconnects by itself
// while the subscriber is away.
func DialPublisher(endpoint, topic string) (*Publisher, error) {
	return newPublisher(endpoint, topic, true)
}

func newPublisher(endpoint, topic string, dial bool) (*Publisher, error) {
	sock := zmq4.NewPub(context.Background(), zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(100))
	if !dial {
		if err := sock.Listen(endpoint); err != nil {
			sock.Close()
			return nil, fmt.Errorf("kvevents: publish on %s: %w", endpoint, err)
		}
	}
	p := &Publisher{sock: sock, topic: []byte(topic), q: make(chan []byte, publishQueue), done: make(chan struct{}),
		endpoint: endpoint}
	if a := sock.Addr(); a != nil && !dial {
		p.endpoint = "tcp://" + a.String()
	}
	if dial {
		// Connected in the background, with retries, as a ZeroMQ socket does: the subscriber
		// may bind after the engine starts. Batches published meanwhile are dropped, as a PUB
		// socket without subscribers drops them.
		go func() { _ = sock.Dial(endpoint) }()
	}
	go p.send()
	return p, nil
}

// Endpoint returns the endpoint the publisher listens on, its port resolved.
func (p *Publisher) Endpoint() string { return p.endpoint }

// Publish queues one encoded batch (the payload is copied). It reports false when the batch
// was dropped: the queue is full or the publisher closed.
func (p *Publisher) Publish(payload []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	select {
	case p.q <- append([]byte{}, payload...): // never nil: nil is Skip
		p.published.Add(1)
		return true
	default:
		p.dropped++
		return false
	}
}

func (p *Publisher) send() {
	defer close(p.done)
	var seq uint64
	for payload := range p.q {
		if payload == nil {
			seq++ // Skip: the batch is lost on the way
			continue
		}
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		seq++
		// A send fails only when the socket is closing; the batch is lost as it would be.
		_ = p.sock.SendMulti(zmq4.NewMsgFrom(p.topic, s[:], payload))
	}
}

// Close sends what is queued, then closes the socket.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.q)
	p.mu.Unlock()
	<-p.done
	return p.sock.Close()
}

// Skip loses the next batch on the way, its sequence number taken (for tests of a gap).
func (p *Publisher) Skip() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.q <- nil
		p.published.Add(1)
	}
}

// Published returns how many batches Publish accepted (queued or sent): the sequence number
// the next one will have.
func (p *Publisher) Published() uint64 { return p.published.Load() }

// Dropped returns how many batches were dropped because the queue was full.
func (p *Publisher) Dropped() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}
