package bench

import (
	"sync"
	"time"
)

// ErrorKind classifies a failed request in the report.
type ErrorKind uint8

// Error kinds. A request that got an HTTP status other than 200 is counted by its status instead.
const (
	// ErrTransport: the request could not be sent or its response head was not received
	// (dial, write or read failure, connection closed).
	ErrTransport ErrorKind = iota
	// ErrTimeout: the request's timeout passed before its response was complete.
	ErrTimeout
	// ErrStream: a 200 response carried an error event (SSE) or error frame (binary).
	ErrStream
	// ErrTruncated: a 200 response ended, or its connection broke, before the format's end marker.
	ErrTruncated
	// ErrProtocol: a 200 response was not in the expected format (bad binary magic, JSON
	// without usage).
	ErrProtocol
	// ErrCanceled: the run was stopped (interrupt) while the request was in flight.
	ErrCanceled
	numErrorKinds
)

// String names the kind as the report does.
func (k ErrorKind) String() string {
	switch k {
	case ErrTransport:
		return "transport"
	case ErrTimeout:
		return "timeout"
	case ErrStream:
		return "stream_error"
	case ErrTruncated:
		return "truncated"
	case ErrProtocol:
		return "protocol"
	case ErrCanceled:
		return "canceled"
	}
	return "unknown"
}

// stats is what a shard of workers accumulates; the report merges all shards.
type stats struct {
	latency Histogram // scheduled send → last byte, successful requests
	ttft    Histogram // scheduled send → first token, successful streamed requests
	itl     Histogram // between consecutive tokens of a stream (0 when read together)
	lag     Histogram // scheduled send → actual send start, every request

	ok      uint64
	late    uint64 // requests sent later than Config.LateAfter behind schedule
	tokens  uint64 // output tokens of successful requests, as their usage reports them
	events  uint64 // token events (deltas, IDs, text frames) of successful requests
	bytes   uint64 // response body bytes of successful requests
	kinds   [numErrorKinds]uint64
	status  map[int]uint64 // non-200 statuses
	samples map[string]string
	lastEnd time.Duration // offset of the last completion
}

func (s *stats) merge(o *stats) {
	s.latency.Merge(&o.latency)
	s.ttft.Merge(&o.ttft)
	s.itl.Merge(&o.itl)
	s.lag.Merge(&o.lag)
	s.ok += o.ok
	s.late += o.late
	s.tokens += o.tokens
	s.events += o.events
	s.bytes += o.bytes
	for i, n := range o.kinds {
		s.kinds[i] += n
	}
	for k, n := range o.status {
		if s.status == nil {
			s.status = map[int]uint64{}
		}
		s.status[k] += n
	}
	for k, v := range o.samples {
		if s.samples == nil {
			s.samples = map[string]string{}
		}
		if _, ok := s.samples[k]; !ok {
			s.samples[k] = v
		}
	}
	s.lastEnd = max(s.lastEnd, o.lastEnd)
}

// failed is the number of failed requests.
func (s *stats) failed() uint64 {
	var n uint64
	for _, c := range s.kinds {
		n += c
	}
	for _, c := range s.status {
		n += c
	}
	return n
}

// sample keeps the first error message seen for an error key, for the report.
func (s *stats) sample(key string, msg []byte) {
	if len(msg) == 0 {
		return
	}
	if s.samples == nil {
		s.samples = map[string]string{}
	}
	if _, ok := s.samples[key]; !ok {
		s.samples[key] = string(msg)
	}
}

// shard is a lock-protected stats that a fixed subset of workers records into, so that workers
// rarely contend and no histogram is shared across cores on every record.
type shard struct {
	mu sync.Mutex
	s  stats
	_  [64]byte // keep neighbouring shards' locks off one cache line
}
