package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

// readReply reads one reply from a raw connection.
func readReply(t *testing.T, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// closedByServer tells whether the server closed c (a read sees EOF or a
// reset) rather than keeping it open (the read times out).
func closedByServer(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestContentLengthWithTransferEncoding: a request carrying both
// Content-Length and Transfer-Encoding is answered 400 invalid_request in
// the contract's envelope and its connection closed (RFC 9112, section
// 6.3), also when it follows a chunked and a sized request on the same
// kept-alive connection; a request with only one of them keeps the
// connection.
func TestContentLengthWithTransferEncoding(t *testing.T) {
	h := start(t, options{})
	c := h.dialFrom(t, "")
	defer c.Close()
	br := bufio.NewReader(c)
	body := `{"email":"accepted_email@x.example"}`
	chunked := "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: " + h.testKey + "\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" + "a\r\n" + body[:10] + "\r\n" + strconvHex(len(body)-10) + ";ext=1\r\n" + body[10:] + "\r\n0\r\n\r\n"
	sized := "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: " + h.testKey + "\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
	both := "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: " + h.testKey + "\r\nContent-Type: application/json\r\n" +
		"content-length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + "0\r\n\r\nGET /v1/requests/x HTTP/1.1\r\nHost: evs\r\n\r\n"
	for i, r := range []string{chunked, sized} {
		if _, err := io.WriteString(c, r); err != nil {
			t.Fatal(err)
		}
		resp, b := readReply(t, br)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d (one framing header): %d, close %v: %s", i, resp.StatusCode, resp.Close, b)
		}
	}
	if _, err := io.WriteString(c, both); err != nil {
		t.Fatal(err)
	}
	resp, b := readReply(t, br)
	var env struct {
		Error struct{ Code, Message, RequestID string }
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("not an envelope: %s", b)
	}
	if resp.StatusCode != 400 || env.Error.Code != "invalid_request" || env.Error.RequestID != resp.Header.Get("X-Request-Id") ||
		!strings.Contains(env.Error.Message, "Content-Length and Transfer-Encoding") {
		t.Fatalf("both framing headers: %d %s", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Error("the reply does not say Connection: close")
	}
	if !closedByServer(c, br) {
		t.Error("the connection stayed open: the smuggled request behind the body could still be read")
	}
}

func itoa(n int) string { return strconvFormat(n, 10) }

func strconvHex(n int) string { return strconvFormat(n, 16) }

func strconvFormat(n, base int) string {
	const digits = "0123456789abcdef"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= base {
		b = append([]byte{digits[n%base]}, b...)
	}
	return string(b)
}

// TestMetricsListenerTimeouts: the metrics listener closes a connection
// that never finishes its headers and one left idle after a scrape, as the
// API listener does (short limits here; 10 s and 120 s by default), and
// still answers scrapes.
func TestMetricsListenerTimeouts(t *testing.T) {
	m := server.NewPrometheus(nil)
	srv := server.MetricsServer(m.Handler(), nil, server.MetricsLimits{ReadHeader: 300 * time.Millisecond, Idle: 300 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	idle, br := dial()
	if _, err := io.WriteString(idle, "GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, b := readReply(t, br)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "evs_") || resp.Close {
		t.Fatalf("scrape: %d, close %v: %.200s", resp.StatusCode, resp.Close, b)
	}
	slow, sbr := dial()
	if _, err := io.WriteString(slow, "GET /metrics HTTP/1.1\r\nHost: m\r\n"); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(idle, br) {
		t.Error("an idle metrics connection stayed open")
	}
	if !closedByServer(slow, sbr) {
		t.Error("a metrics connection that never finished its headers stayed open")
	}
}
