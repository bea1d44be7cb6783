package server

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
)

// A request carrying both Content-Length and Transfer-Encoding is how
// request smuggling starts (RFC 9112, section 6.3). net/http deletes
// Content-Length before a handler sees it, so framingConn watches the bytes
// net/http reads from each connection, follows HTTP/1.1 message framing,
// and records for every request head whether it carried both; the gateway
// takes one verdict per request, in order.

// framingListener wraps each accepted connection in a framingConn.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingKey is the context key of a request's framingConn (ConnContext).
type framingKey struct{}

// connContext puts the connection's framingConn into its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// smuggled takes the verdict of the next request of ctx's connection: true
// when its head had both Content-Length and Transfer-Encoding.
func smuggled(ctx context.Context) bool {
	fc, ok := ctx.Value(framingKey{}).(*framingConn)
	if !ok {
		return false
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.verdicts) == 0 {
		return false
	}
	v := fc.verdicts[0]
	fc.verdicts = fc.verdicts[1:]
	return v
}

// Parser states of framingConn.
const (
	inHead      = iota // reading a request head
	inBody             // remain bytes of a Content-Length body
	inChunkSize        // a chunk-size line
	inChunkData        // remain bytes of chunk data
	inChunkEnd         // the line end after chunk data
	inTrailer          // trailer lines, up to an empty one
	lost               // gave up: framing not understood, or no longer needed
)

// Bounds of what framingConn buffers; beyond them net/http refuses the
// request itself (431 or 400) and closes the connection.
const (
	maxFramedHead = MaxHeaderBytes + 4096
	maxFramedLine = 4096
)

// framingConn is a connection that follows its requests' framing as
// net/http reads them.
type framingConn struct {
	net.Conn
	mu       sync.Mutex
	state    int
	buf      []byte // the head, or the line, read so far
	remain   int64
	verdicts []bool
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.feed(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// feed advances the parser over p; the caller holds mu.
func (c *framingConn) feed(p []byte) {
	for len(p) > 0 {
		switch c.state {
		case lost:
			return
		case inHead:
			if len(c.buf) == 0 {
				// Line ends between requests are skipped, as net/http
				// skips them.
				p = bytes.TrimLeft(p, "\r\n")
				if len(p) == 0 {
					return
				}
				// Most heads arrive in one read: parse them in place.
				if end := headEnd(p, 0); end >= 0 {
					c.head(p[:end])
					p = p[end:]
					continue
				}
			}
			old := len(c.buf)
			c.buf = append(c.buf, p...)
			end := headEnd(c.buf, max(0, old-3))
			if end < 0 {
				if len(c.buf) > maxFramedHead {
					c.giveUp()
				}
				return
			}
			p = p[end-old:]
			c.head(c.buf[:end])
			c.buf = c.buf[:0]
		case inBody, inChunkData:
			k := min(int64(len(p)), c.remain)
			c.remain -= k
			p = p[k:]
			if c.remain == 0 {
				if c.state == inBody {
					c.state = inHead
				} else {
					c.state = inChunkEnd
				}
			}
		case inChunkSize, inChunkEnd, inTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				c.buf = append(c.buf, p...)
				if len(c.buf) > maxFramedLine {
					c.giveUp()
				}
				return
			}
			c.buf = append(c.buf, p[:i]...)
			p = p[i+1:]
			line := strings.TrimRight(string(c.buf), "\r")
			c.buf = c.buf[:0]
			c.line(line)
		}
	}
}

// headEnd returns the index just past the empty line that ends the head in
// b (searching from from), or -1. Lines may end in CRLF or a bare LF, as
// net/http accepts both.
func headEnd(b []byte, from int) int {
	for i := bytes.IndexByte(b[from:], '\n'); i >= 0; {
		at := from + i
		rest := b[at+1:]
		switch {
		case len(rest) >= 1 && rest[0] == '\n':
			return at + 2
		case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
			return at + 3
		}
		from = at + 1
		i = bytes.IndexByte(b[from:], '\n')
	}
	return -1
}

var (
	hdrContentLength    = []byte("Content-Length")
	hdrTransferEncoding = []byte("Transfer-Encoding")
)

// head records the verdict of a request head and sets up its body.
func (c *framingConn) head(h []byte) {
	var (
		cl, te bool
		n      int64
	)
	// The request line first, then one header a line.
	_, rest, _ := bytes.Cut(h, []byte("\n"))
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		name, value, ok := bytes.Cut(bytes.TrimRight(l, "\r"), []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, hdrContentLength):
			cl = true
			var err error
			if n, err = strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err != nil {
				n = -1 // like a negative length: refused
			}
		case bytes.EqualFold(name, hdrTransferEncoding):
			te = true
		}
	}
	c.verdicts = append(c.verdicts, cl && te)
	switch {
	case cl && te, cl && n < 0:
		// Answered and closed (here, or by net/http's own 400): what
		// follows is never read as a request.
		c.giveUp()
	case te:
		c.state = inChunkSize
	case cl && n > 0:
		c.state, c.remain = inBody, n
	}
}

// line takes one line of a chunked body.
func (c *framingConn) line(l string) {
	switch c.state {
	case inChunkSize:
		size, _, _ := strings.Cut(l, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		switch {
		case err != nil || n < 0:
			c.giveUp()
		case n == 0:
			c.state = inTrailer
		default:
			c.state, c.remain = inChunkData, n
		}
	case inChunkEnd:
		if l != "" {
			c.giveUp()
			return
		}
		c.state = inChunkSize
	case inTrailer:
		if l == "" {
			c.state = inHead
		}
	}
}

// giveUp stops following the connection; the requests still to come get
// no verdict, which lets them through.
func (c *framingConn) giveUp() {
	c.state = lost
	c.buf = nil
}
