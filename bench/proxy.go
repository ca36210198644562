package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/h1"
	"github.com/layer0ai/layer0/internal/server"
)

// The bare proxy is the report's reference for what layer0's own logic costs: the same HTTP
// stack on both sides as layer0 (the server of cleartext HTTP/1.1 the report's -http1 names —
// h1server or net/http — towards the client, internal/h1 towards the upstream) and nothing else — no decoding, auth, limits, routing, metrics or log. Whatever
// layer0 costs beyond it is its logic; what the bare proxy costs is the floor of this design on
// the machine.
const childProxy = "child-proxy"

// runProxyChild serves the bare proxy in front of the upstream at --upstream.
func runProxyChild(args []string) error {
	fs := flag.NewFlagSet(childProxy, flag.ContinueOnError)
	upstream := fs.String("upstream", "", "upstream host:port")
	http1 := fs.String("http1", "net/http", "server towards the client: net/http or lean")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p := &bareProxy{pool: &h1.Pool{Addr: *upstream, MaxIdle: 1024, ReadSize: 16 << 10}}
	ln, pl, err := listenChild()
	if err != nil {
		return err
	}
	srv := server.HTTPServer(p, server.ListenOptions{ReadHeaderTimeout: 10 * time.Second, HTTP1: *http1})
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ready %s %s\n", ln.Addr(), pl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// bareProxy forwards each request's body to the upstream and copies the answer back, flushing
// whenever the upstream has nothing more buffered.
type bareProxy struct {
	pool *h1.Pool
	bufs sync.Pool
}

func (p *bareProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := p.bufs.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	defer p.bufs.Put(b)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	hdr := "Content-Type: " + r.Header.Get("Content-Type") + "\r\n"
	req := h1.AppendRequest((*b)[:0], r.Method, r.URL.RequestURI(), p.pool.Addr, len(body), []byte(hdr))
	req = append(req, body...)
	*b = req
	c, err := p.pool.Get(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if err := p.forward(w, c, req); err != nil {
		_ = c.Close()
		return
	}
	p.pool.Put(c)
}

func (p *bareProxy) forward(w http.ResponseWriter, c *h1.Conn, req []byte) error {
	if err := c.WriteRequest(req); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return err
	}
	head, err := c.ReadHead()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return err
	}
	h := w.Header()
	ct := head.Get("Content-Type")
	if ct != nil {
		h["Content-Type"] = []string{string(ct)}
	}
	// As layer0 does: a complete JSON answer goes out with its length, in one write; a stream
	// goes out chunked, flushed whenever more is to come and nothing more is buffered, its end
	// with the chunked body's end.
	stream := !bytes.HasPrefix(ct, []byte("application/json"))
	if !stream && head.ContentLength >= 0 {
		h["Content-Length"] = []string{strconv.FormatInt(head.ContentLength, 10)}
	}
	w.WriteHeader(head.Status)
	rc := http.NewResponseController(w)
	for {
		piece, err := c.Next()
		if len(piece) > 0 {
			if _, werr := w.Write(piece); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if stream && !c.BodyDone() && c.Buffered() == 0 {
			if err := rc.Flush(); err != nil {
				return err
			}
		}
	}
}
