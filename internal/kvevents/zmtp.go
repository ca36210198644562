package kvevents

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
)

// This file is the subscriber's side of ZMTP 3 (ZeroMQ's wire protocol, RFC 23/ZMTP), as small
// as a SUB socket with the NULL mechanism needs it to be. It replaces a ZeroMQ library on the
// reading side because that library allocates every frame at the size its sender announces
// before anything can check it: one frame announced at 1 TiB ended the process. Here a frame's
// size is checked against a bound before a byte of it is read, and its bytes are kept only as
// they arrive.
//
// The flow, on one TCP connection to the publisher:
//
//	greeting   both sides send 64 bytes: 0xFF, 8 bytes of padding, 0x7F (the signature), the
//	           version (major 3, minor 0), the mechanism ("NULL", zero-padded to 20 bytes),
//	           as-server (0), 31 bytes of filler. We speak 3.0: a 3.1 publisher then takes
//	           subscriptions as messages, which every 3.x publisher does.
//	handshake  both sides send a READY command carrying the property Socket-Type (ours "SUB";
//	           the publisher's must be "PUB" or "XPUB"). An ERROR command ends the connection.
//	subscribe  a one-frame message: 0x01 then the topic.
//	traffic    messages of one or more frames, each frame
//	             flags (1 byte: 0x01 more frames follow, 0x02 long size, 0x04 command)
//	             size  (1 byte, or 8 bytes big-endian with the long flag)
//	             body  (size bytes)
//	           A PING command (ZMTP 3.1 heartbeats) is answered with a PONG; other commands are
//	           ignored.

// zmtp frame flags.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// greetingLen is the length of a ZMTP 3 greeting.
const greetingLen = 64

// maxCommand bounds a command's body (the publisher's READY with its metadata, a PING).
const maxCommand = 64 << 10

// maxFrames bounds the frames of one message (vLLM sends three).
const maxFrames = 16

// ErrTooLarge is the cause of a connection closed because the publisher announced a frame (or
// a message) larger than the subscription's bound.
var ErrTooLarge = errors.New("kvevents: frame larger than the bound")

// greeting is the ZMTP 3.0 greeting of a NULL-mechanism client.
var greeting = func() (g [greetingLen]byte) {
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}()

// zmtpConn reads messages from a publisher. Its buffers are reused from one message to the
// next, so a message's frames are valid until the next call to recv.
type zmtpConn struct {
	c      net.Conn
	r      *bufio.Reader
	max    int      // the largest message (its frames together) accepted
	buf    []byte   // the current message's frames, back to back
	ends   []int    // the end of each frame in buf
	frames [][]byte // the current message's frames, views of buf
}

// newZMTPConn wraps c; max bounds a message's size.
func newZMTPConn(c net.Conn, max int) *zmtpConn {
	return &zmtpConn{c: c, r: bufio.NewReaderSize(c, 64<<10), max: max}
}

// handshake exchanges greetings and READY commands and subscribes to topic.
func (z *zmtpConn) handshake(topic string) error {
	out := make([]byte, 0, greetingLen+64+len(topic))
	out = append(out, greeting[:]...)
	out = appendFrame(out, flagCommand, appendProperty([]byte("\x05READY"), "Socket-Type", "SUB"))
	out = appendFrame(out, 0, append([]byte{1}, topic...))
	if _, err := z.c.Write(out); err != nil {
		return fmt.Errorf("kvevents: send the greeting: %w", err)
	}
	var g [greetingLen]byte
	if _, err := io.ReadFull(z.r, g[:]); err != nil {
		return fmt.Errorf("kvevents: read the greeting: %w", err)
	}
	if g[0] != 0xFF || g[9] != 0x7F {
		return errors.New("kvevents: the peer does not speak ZMTP (bad greeting signature)")
	}
	if g[10] < 3 {
		return fmt.Errorf("kvevents: the peer speaks ZMTP %d.%d; 3.0 or later is needed", g[10], g[11])
	}
	if mech := string(bytes.TrimRight(g[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("kvevents: the peer asks for the %.20q security mechanism; only NULL is supported", mech)
	}
	flags, body, err := z.frame(maxCommand)
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 {
		return errors.New("kvevents: the peer sent a message before its READY command")
	}
	name, props, err := command(body)
	if err != nil {
		return err
	}
	switch name {
	case "READY":
	case "ERROR":
		reason := props
		if len(reason) > 0 {
			reason = reason[1:min(len(reason), 1+int(reason[0]))]
		}
		return fmt.Errorf("kvevents: the peer refused the connection: %.64q", reason)
	default:
		return fmt.Errorf("kvevents: the peer sent %.32q before READY", name)
	}
	st, err := property(props, "Socket-Type")
	if err != nil {
		return err
	}
	if st != "PUB" && st != "XPUB" {
		return fmt.Errorf("kvevents: the peer is a %.16q socket, not a publisher", st)
	}
	return nil
}

// recv reads the next message and returns its frames, answering heartbeats on the way.
func (z *zmtpConn) recv() ([][]byte, error) {
	z.buf, z.ends = z.buf[:0], z.ends[:0]
	for {
		flags, body, err := z.frame(z.max - len(z.buf))
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			if len(z.ends) > 0 {
				return nil, errors.New("kvevents: a command inside a multipart message")
			}
			if err := z.command(body); err != nil {
				return nil, err
			}
			z.buf = z.buf[:0]
			continue
		}
		z.ends = append(z.ends, len(z.buf))
		if flags&flagMore == 0 {
			break
		}
		if len(z.ends) == maxFrames {
			return nil, fmt.Errorf("kvevents: a message of more than %d frames", maxFrames)
		}
	}
	z.frames = z.frames[:0]
	start := 0
	for _, end := range z.ends {
		z.frames = append(z.frames, z.buf[start:end:end])
		start = end
	}
	return z.frames, nil
}

// command handles a command received after the handshake.
func (z *zmtpConn) command(body []byte) error {
	name, rest, err := command(body)
	if err != nil {
		return err
	}
	switch name {
	case "PING": // TTL (2 bytes), then a context of up to 16 bytes to send back
		if len(rest) < 2 || len(rest) > 2+16 {
			return errors.New("kvevents: malformed PING command")
		}
		pong := appendFrame(nil, flagCommand, append([]byte("\x04PONG"), rest[2:]...))
		if _, err := z.c.Write(pong); err != nil {
			return fmt.Errorf("kvevents: answer a heartbeat: %w", err)
		}
	case "ERROR":
		return errors.New("kvevents: the peer sent an ERROR command")
	}
	return nil
}

// frame reads one frame header, checks its size against limit (the bytes the message may
// still take) before reading the body, and appends the body to z.buf, growing it only as the
// bytes arrive. It returns the flags and the body (a view of z.buf).
func (z *zmtpConn) frame(limit int) (flags byte, body []byte, err error) {
	if flags, err = z.r.ReadByte(); err != nil {
		return 0, nil, fmt.Errorf("kvevents: read a frame: %w", err)
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, nil, fmt.Errorf("kvevents: bad frame flags %#x", flags)
	}
	var size uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(z.r, b[:]); err != nil {
			return 0, nil, fmt.Errorf("kvevents: read a frame: %w", err)
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := z.r.ReadByte()
		if err != nil {
			return 0, nil, fmt.Errorf("kvevents: read a frame: %w", err)
		}
		size = uint64(b)
	}
	if flags&flagCommand != 0 {
		limit = maxCommand
	}
	if size > uint64(max(limit, 0)) {
		return 0, nil, fmt.Errorf("%w: %d bytes announced, at most %d accepted", ErrTooLarge, size, z.max)
	}
	start := len(z.buf)
	for left := int(size); left > 0; {
		n := min(left, readChunk)
		z.buf = slices.Grow(z.buf, n)
		if _, err := io.ReadFull(z.r, z.buf[len(z.buf):len(z.buf)+n]); err != nil {
			return 0, nil, fmt.Errorf("kvevents: read a frame: %w", err)
		}
		z.buf = z.buf[:len(z.buf)+n]
		left -= n
	}
	return flags, z.buf[start:], nil
}

// readChunk is how much of a frame is read (and the buffer grown) at a time: a frame that is
// announced and never sent costs no more than this beyond what did arrive.
const readChunk = 1 << 20

// command splits a command body into its name and the rest.
func command(body []byte) (name string, rest []byte, err error) {
	if len(body) < 1 || len(body) < 1+int(body[0]) {
		return "", nil, errors.New("kvevents: malformed command")
	}
	return string(body[1 : 1+body[0]]), body[1+body[0]:], nil
}

// property finds a metadata property (name-length byte, name, value-length uint32, value) by
// its name, compared ignoring case as ZMTP asks.
func property(props []byte, name string) (string, error) {
	for len(props) > 0 {
		n := int(props[0])
		if len(props) < 1+n+4 {
			return "", errors.New("kvevents: malformed READY metadata")
		}
		k := props[1 : 1+n]
		vn := binary.BigEndian.Uint32(props[1+n:])
		props = props[1+n+4:]
		if uint64(vn) > uint64(len(props)) {
			return "", errors.New("kvevents: malformed READY metadata")
		}
		if bytes.EqualFold(k, []byte(name)) {
			return string(props[:vn]), nil
		}
		props = props[vn:]
	}
	return "", fmt.Errorf("kvevents: the peer's READY has no %s", name)
}

// appendFrame appends a frame with flags and body, choosing the short or long size.
func appendFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		dst = append(dst, flags|flagLong)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// appendProperty appends a metadata property.
func appendProperty(dst []byte, name, value string) []byte {
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
	return append(dst, value...)
}
