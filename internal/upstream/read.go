package upstream

import "io"

// ReadAll appends what r has to dst, up to max bytes (what is beyond is left unread, as with
// io.LimitReader), growing dst as needed: with a pooled dst, reading a body allocates nothing.
func ReadAll(dst []byte, r io.Reader, max int) ([]byte, error) {
	limit := len(dst) + max
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		end := min(cap(dst), limit)
		if end == len(dst) {
			return dst, nil
		}
		n, err := r.Read(dst[len(dst):end])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
