package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoder encodes batches of events in vLLM's array form: [ts, [event…]] with each event
// [tag, fields…] — BlockStored as [tag, block_hashes, parent_block_hash, token_ids,
// block_size, lora_id, medium], BlockRemoved as [tag, block_hashes, medium], AllBlocksCleared
// as [tag]. Integer hashes are written as unsigned integers. The embedded simulator publishes
// with it. An Encoder is not safe for concurrent use.
type Encoder struct {
	buf bytes.Buffer
	e   *msgpack.Encoder
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	x := &Encoder{}
	x.e = msgpack.NewEncoder(&x.buf)
	return x
}

// Encode returns the payload of a batch of events at ts; the bytes are valid until the next
// Encode. Medium is written as "GPU" when empty, and LoRA as no adapter.
func (x *Encoder) Encode(ts float64, events []Event) ([]byte, error) {
	x.buf.Reset()
	e := x.e
	err := e.EncodeArrayLen(2)
	if err == nil {
		err = e.EncodeFloat64(ts)
	}
	if err == nil {
		err = e.EncodeArrayLen(len(events))
	}
	for i := range events {
		if err != nil {
			break
		}
		err = x.event(&events[i])
	}
	if err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", err)
	}
	return x.buf.Bytes(), nil
}

// event writes ev as [tag, fields…]: the block kinds have their hashes first and their medium
// last, around BlockStored's own fields.
func (x *Encoder) event(ev *Event) error {
	e := x.e
	var n int // the array's length, the tag included
	switch ev.Kind {
	case BlockStored:
		n = 7
	case BlockRemoved:
		n = 3
	case AllBlocksCleared:
		n = 1
	default:
		return fmt.Errorf("event of kind %v", ev.Kind)
	}
	if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	if err := e.EncodeString(ev.Kind.String()); err != nil || ev.Kind == AllBlocksCleared {
		return err // AllBlocksCleared is its tag alone
	}
	if err := x.hashes(ev.Hashes); err != nil {
		return err
	}
	if ev.Kind == BlockStored {
		if err := x.stored(ev); err != nil {
			return err
		}
	}
	medium := ev.Medium
	if medium == "" {
		medium = "GPU"
	}
	return e.EncodeString(medium)
}

// stored writes the fields of a BlockStored event between its hashes and its medium:
// parent_block_hash, token_ids, block_size and lora_id.
func (x *Encoder) stored(ev *Event) error {
	e := x.e
	var err error
	if ev.HasParent {
		err = e.EncodeUint(uint64(ev.Parent))
	} else {
		err = e.EncodeNil()
	}
	if err != nil {
		return err
	}
	if err := e.EncodeArrayLen(len(ev.Tokens)); err != nil {
		return err
	}
	for _, t := range ev.Tokens {
		if err := e.EncodeUint(uint64(t)); err != nil {
			return err
		}
	}
	if err := e.EncodeInt(int64(ev.BlockSize)); err != nil {
		return err
	}
	return e.EncodeNil() // lora_id
}

func (x *Encoder) hashes(hs []Hash) error {
	if err := x.e.EncodeArrayLen(len(hs)); err != nil {
		return err
	}
	for _, h := range hs {
		if err := x.e.EncodeUint(uint64(h)); err != nil {
			return err
		}
	}
	return nil
}
