package binary

// Reset makes d the decoder of a new version-v stream, keeping its buffer, so that a client that
// decodes one response after another (the load generator) allocates nothing per response.
func (d *Decoder) Reset(v Version) {
	*d = Decoder{v: v, buf: d.buf[:0]}
}
