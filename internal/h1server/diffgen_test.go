package h1server

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// genRequests builds one to three pipelined requests from parts that are each mostly valid,
// sometimes not: the byte-level fuzzer rarely builds a well-formed chunked body or a head over
// the lean server's read buffer, this does it often.
func genRequests(r *rand.Rand) []byte {
	var b strings.Builder
	for range 1 + r.IntN(3) {
		genRequest(r, &b)
	}
	return []byte(b.String())
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func genRequest(r *rand.Rand, b *strings.Builder) {
	method := pick(r, "GET", "POST", "POST", "PUT", "HEAD", "OPTIONS", "DELETE", "get")
	target := pick(r, "/", "/noread", "/read1", "/a/b?c=d", "/p%20q", "http://h.example/x", "*", "//x", "/a#f")
	version := pick(r, "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0")
	fmt.Fprintf(b, "%s %s %s\r\n", method, target, version)
	if version == "HTTP/1.1" || r.IntN(2) == 0 {
		fmt.Fprintf(b, "Host: %s\r\n", pick(r, "x", "h.example:8080", "[::1]", "", "x"))
	}
	if r.IntN(4) == 0 {
		fmt.Fprintf(b, "Connection: %s\r\n", pick(r, "close", "keep-alive", "Keep-Alive, close", "upgrade", "x close", "x,keep-alive"))
		if r.IntN(3) == 0 {
			fmt.Fprintf(b, "Connection: %s\r\n", pick(r, "close", "keep-alive", "x"))
		}
	}
	if r.IntN(8) == 0 {
		fmt.Fprintf(b, "Expect: %s\r\n", pick(r, "100-continue", "100-Continue", "nope"))
	}
	for range r.IntN(4) {
		// A header large enough, now and then, to carry the head over 8 KiB.
		n := pick(r, 1, 10, 100, 3000, 9000)
		fmt.Fprintf(b, "%s: %s\r\n", pick(r, "X-A", "x-b", "Accept", "Pragma", "Trailer"), strings.Repeat(pick(r, "v", " ", "\t", "é"), n))
	}
	if r.IntN(10) == 0 {
		fmt.Fprintf(b, "%s: %s\r\n", pick(r, "Content-Length", "content-length", "Transfer-Encoding", "Host"), pick(r, "3", "chunked", "x", ""))
	}
	body := strings.Repeat(pick(r, "z", "\r\n", "0"), pick(r, 0, 1, 5, 100, 5000))
	cl, te := pick(r, "Content-Length", "Content-Length", "content-length", "CONTENT-LENGTH"), pick(r, "Transfer-Encoding", "Transfer-Encoding", "transfer-encoding")
	switch r.IntN(6) {
	case 0, 1: // Content-Length, right or wrong
		n := len(body)
		if r.IntN(4) == 0 {
			n += pick(r, -1, 1, 10)
		}
		fmt.Fprintf(b, "%s: %s\r\n\r\n%s", cl, pick(r, strconv.Itoa(n), strconv.Itoa(n), "0"+strconv.Itoa(n)), body)
	case 2, 3: // chunked, in random pieces, with extensions and flaws now and then
		fmt.Fprintf(b, "%s: %s\r\n\r\n", te, pick(r, "chunked", "chunked", "Chunked"))
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(2000))
			ext := pick(r, "", "", ";a=b", ";q=\"x y\"")
			fmt.Fprintf(b, "%x%s\r\n%s%s", n, ext, rest[:n], pick(r, "\r\n", "\r\n", "\r\n", "\n", ""))
			rest = rest[n:]
		}
		b.WriteString(pick(r, "0\r\n\r\n", "0\r\n\r\n", "0\r\nX-T: v\r\n\r\n", "0\r\n", "000;e\r\n\r\n"))
	case 4: // both
		fmt.Fprintf(b, "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), len(body), body)
	default: // none
		b.WriteString("\r\n")
	}
	if r.IntN(10) == 0 {
		b.WriteString(pick(r, "\r\n", "\n", "\r\n\r\n")) // stray line ends between requests
	}
}

// TestDiffGenerated compares the two servers on generated pipelines of requests, some written
// in pieces. H1DIFF_GEN=n runs n instead of 200, from a random seed (logged).
func TestDiffGenerated(t *testing.T) {
	n, seed := 200, uint64(1)
	if v := os.Getenv("H1DIFF_GEN"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("H1DIFF_GEN=%q: %v", v, err)
		}
		seed = rand.Uint64()
	}
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range n {
		input := genRequests(r)
		var cuts []int
		if r.IntN(3) == 0 {
			cuts = splitAt(len(input), r.Uint32())
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			diffOne(t, leanServe, input, cuts, true)
		})
	}
}
