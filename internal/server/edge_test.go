package server_test

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// The HTTP edge of `evs serve` against an attacker (contract, section 9).

// dialFrom opens a TCP connection to the server from a chosen loopback
// address, so tests can play several clients.
func (h *harness) dialFrom(t *testing.T, local string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatalf("dial from %s: %v", local, err)
	}
	return c
}

// clientFrom is an HTTP client whose connections come from local.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// slowBody sends the headers of a POST that promises a body and never sends
// it.
func slowBody(t *testing.T, c net.Conn, key string) {
	t.Helper()
	hdr := "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
	if key != "" {
		hdr += "X-Api-Key: " + key + "\r\n"
	}
	if _, err := io.WriteString(c, hdr+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// TestSlowBodies: 300 connections whose body never comes, with a key and
// without, neither stop legitimate calls nor stay open past the body
// deadline (1 s here, 30 s by default).
func TestSlowBodies(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) { o.BodyTimeout = time.Second }})
	const n = 300
	conns := make([]net.Conn, n)
	for i := range conns {
		// Three addresses: one address holds at most an eighth of
		// EVS_MAX_CONNS (TestConnectionShare).
		conns[i] = h.dialFrom(t, fmt.Sprintf("127.0.0.%d", 3+i%3))
		key := ""
		if i%2 == 0 {
			key = h.testKey
		}
		slowBody(t, conns[i], key)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	// Legitimate calls go through while all of them are open.
	for i := 0; i < 5; i++ {
		r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"alice@x.example","mode":"quick"}`})
		if r.status != 200 {
			t.Fatalf("legitimate call %d during the attack: %d %s", i, r.status, r.body)
		}
	}
	// Every slow connection is closed by the server. The bound is a
	// liveness check with a wide margin over the 1 s deadline; without a
	// deadline these connections stayed open for good.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				// Keyed calls time out reading the body (400); the others
				// are refused before it is read (401, or 429 once this
				// address has failed 20 times).
				if resp.StatusCode != 400 && resp.StatusCode != 401 && resp.StatusCode != 429 {
					errs <- fmt.Errorf("conn %d: status %d", i, resp.StatusCode)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_, err = c.Read(make([]byte, 1))
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				errs <- fmt.Errorf("conn %d still open after 20 s", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConnectionCap: with EVS_MAX_CONNS=8, eight open connections (from
// four client addresses, each within its share) keep a ninth from being
// served until one of them closes.
func TestConnectionCap(t *testing.T) {
	const max = 8
	h := start(t, options{server: func(o *server.Options) { o.Config.MaxConns = max }})
	held := make([]net.Conn, max)
	for i := range held {
		// One full call each proves the connection was accepted; it then
		// stays open, idle, kept alive.
		c := h.dialFrom(t, fmt.Sprintf("127.0.0.%d", 10+i/2))
		body := `{"email":"alice@x.example","mode":"quick"}`
		fmt.Fprintf(c, "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", h.testKey, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("holder %d: %v %v", i, err, resp)
		}
		resp.Body.Close()
		held[i] = c
	}
	done := make(chan int, 1)
	go func() {
		resp, err := clientFrom("127.0.0.20").Post(h.base+"/v1/verify", "application/json", strings.NewReader(`{}`))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("a ninth connection was served (%d) while %d were open", code, max)
	case <-time.After(500 * time.Millisecond):
	}
	held[0].Close()
	select {
	case code := <-done:
		if code != 401 {
			t.Fatalf("ninth call after a slot freed: %d, want 401", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ninth call was not served after a slot freed")
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

// TestConnectionShare: one client address holds at most its share of the
// connections (an eighth of EVS_MAX_CONNS): past it, its connections are
// closed before a byte is read, while another address is served; a
// connection closed gives its address's place back.
func TestConnectionShare(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) { o.Config.MaxConns = 16 }})
	call := func(c net.Conn) error {
		body := `{"email":"alice@x.example","mode":"quick"}`
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", h.testKey, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	held := []net.Conn{h.dialFrom(t, "127.0.0.30"), h.dialFrom(t, "127.0.0.30")} // the share of 16: 2
	for i, c := range held {
		defer c.Close()
		if err := call(c); err != nil {
			t.Fatalf("connection %d within the share: %v", i, err)
		}
	}
	over := h.dialFrom(t, "127.0.0.30")
	defer over.Close()
	if err := call(over); err == nil {
		t.Fatal("a third connection from one address was served; its share is 2")
	}
	other := h.dialFrom(t, "127.0.0.31")
	defer other.Close()
	if err := call(other); err != nil {
		t.Fatalf("another address while the first holds its share: %v", err)
	}
	held[0].Close()
	// The server notices the close when it reads the connection again:
	// at once, as it waits for the next request on it.
	testkit.Eventually(t, 10*time.Second, func() error {
		c := h.dialFrom(t, "127.0.0.30")
		defer c.Close()
		if err := call(c); err != nil {
			return fmt.Errorf("no place given back after a close: %w", err)
		}
		return nil
	})
}

// TestBodyReadOnlyToLimit: a body streamed without end is refused with 400
// after the route's limit, long before the client has sent it all; one
// that declares its size up front is refused without being read.
func TestBodyReadOnlyToLimit(t *testing.T) {
	h := start(t, options{})
	c := h.dialFrom(t, "127.0.0.1")
	defer c.Close()
	// A small send buffer keeps the kernel from soaking up megabytes.
	_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	fmt.Fprintf(c, "POST /v1/verify HTTP/1.1\r\nHost: evs\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", h.testKey)
	const total = 64 << 20
	var mu sync.Mutex
	sent := 0
	go func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat("x", 4096))
		for s := 0; s < total; s += 4096 {
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
			mu.Lock()
			sent += 4096
			mu.Unlock()
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no reply to an endless body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	mu.Lock()
	sentAtReply := sent
	mu.Unlock()
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"payload_too_large"`) || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("endless body: %d %s", resp.StatusCode, b)
	}
	// The old gateway read 10 MiB before looking at the route's 8 KiB.
	if sentAtReply >= 4<<20 {
		t.Fatalf("the reply came after %d bytes of body were sent", sentAtReply)
	}
	t.Logf("refused after %d bytes sent (kernel buffers included)", sentAtReply)

	// A declared length over the limit: refused on the headers alone.
	c2 := h.dialFrom(t, "127.0.0.1")
	defer c2.Close()
	fmt.Fprintf(c2, "POST /v1/requests HTTP/1.1\r\nHost: evs\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", h.testKey, 7<<20)
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != 413 || !resp.Close {
		t.Fatalf("7 MiB declared on batch creation, none sent: %v %v", err, resp)
	}
}

// TestHeaderLimit: request line and headers up to 16 KiB are read; beyond,
// 431 and the connection closes.
func TestHeaderLimit(t *testing.T) {
	h := start(t, options{})
	call := func(pad int) int {
		r, _ := http.NewRequest("POST", h.base+"/v1/verify", strings.NewReader(`{"email":"alice@x.example","mode":"quick"}`))
		r.Header.Set("X-Api-Key", h.testKey)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Pad", strings.Repeat("p", pad))
		resp, err := clientFrom("127.0.0.1").Do(r)
		if err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(15 << 10); code != 200 {
		t.Fatalf("15 KiB of headers: %d, want 200", code)
	}
	if code := call(server.MaxHeaderBytes); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("over 16 KiB of headers: %d, want 431", code)
	}
}

// TestRevokedKeyStarredPath: a revoked key on a path full of '*' is denied;
// the old matcher backtracked for seconds per call from 12 stars. What a
// call costs is BenchmarkRevokedKeyStarredPath's figure.
func TestRevokedKeyStarredPath(t *testing.T) {
	h := start(t, options{})
	revoked := h.revokedKey()
	for _, n := range []int{50, 500} {
		path := "/v1/requests/" + strings.Repeat("*", n) + "/results"
		if r := h.do(req{path: path, key: revoked}); r.status != 403 || r.errorCode(t) != "forbidden" {
			t.Fatalf("%d stars: %d %s", n, r.status, r.body)
		}
	}
}

// TestFailedAuthThrottle: beyond 20 failed authentications in a second from
// one address, that address gets 429 with Retry-After — even with a key it
// has not used yet — while other addresses are unaffected.
func TestFailedAuthThrottle(t *testing.T) {
	h := start(t, options{})
	attacker, neighbour, bystander := clientFrom("127.0.0.2"), clientFrom("127.0.0.2"), clientFrom("127.0.0.4")
	bad := "evs." + strings.Repeat("A", 43)
	verify := func(c *http.Client, key string) reply {
		return h.doFrom(c, req{method: "POST", path: "/v1/verify", key: key, body: `{"email":"alice@x.example","mode":"quick"}`})
	}
	// Made before the warm-up: a change to keys drops the cached answers.
	var revoked []string
	for i := 0; i < 10; i++ {
		revoked = append(revoked, h.revokedKey()) // 403s count as failures too
	}
	// A key seen to work from anywhere keeps working from the attacker's
	// address: it is in the authorizer cache, which a guesser cannot be.
	if r := verify(bystander, h.otherKey); r.status != 200 {
		t.Fatalf("warm-up: %d", r.status)
	}
	for i := 0; i < 20; i++ {
		key := bad
		if i%2 == 1 {
			key = revoked[i/2]
		}
		if r := verify(attacker, key); r.status != 401 && r.status != 403 {
			t.Fatalf("failure %d: %d %s", i+1, r.status, r.body)
		}
	}
	r := verify(attacker, bad)
	if r.status != 429 || r.errorCode(t) != "rate_limited" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("21st failure in a second: %d %v %s", r.status, r.header, r.body)
	}
	if r := verify(neighbour, h.liveKey); r.status != 429 {
		t.Fatalf("an uncached key from the throttled address: %d, want 429", r.status)
	}
	if r := verify(neighbour, h.otherKey); r.status != 200 {
		t.Fatalf("a cached good key from the throttled address: %d, want 200", r.status)
	}
	if r := verify(bystander, bad); r.status != 401 {
		t.Fatalf("another address: %d, want 401", r.status)
	}
	if r := verify(bystander, h.testKey); r.status != 200 {
		t.Fatalf("another address with a good key: %d", r.status)
	}
	h.clock.Advance(time.Second)
	if r := verify(attacker, bad); r.status != 401 {
		t.Fatalf("a second later: %d, want 401", r.status)
	}
}

// TestExactPaths: a trailing or doubled slash is another path, with no route.
func TestExactPaths(t *testing.T) {
	h := start(t, options{})
	body := `{"emails":["alice@good.example"],"mode":"quick"}`
	for _, p := range []string{"/v1/requests/", "/v1/verify/", "//v1/requests", "/v1//requests", "/v1/requests/00000000-0000-4000-8000-000000000000/"} {
		r := h.do(req{method: "POST", path: p, key: h.testKey, body: body, headers: map[string]string{"Idempotency-Key": "same"}})
		if r.status != 404 || r.errorCode(t) != "not_found" {
			t.Fatalf("POST %s: %d %s", p, r.status, r.body)
		}
	}
	if r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: body, headers: map[string]string{"Idempotency-Key": "same"}}); r.status != 201 {
		t.Fatalf("POST /v1/requests: %d %s", r.status, r.body)
	}
}

// TestInvalidUTF8 is refused, never silently replaced with U+FFFD.
func TestInvalidUTF8(t *testing.T) {
	h := start(t, options{})
	for _, c := range []struct{ path, body string }{
		{"/v1/verify", "{\"email\":\"al\xffice@good.example\"}"},
		{"/v1/verify", "{\"email\":\"alice@good.example\",\"mode\":\"qu\xc3ick\"}"},
		{"/v1/requests", "{\"emails\":[\"alice@good.example\",\"b\xedob@good.example\"]}"},
	} {
		r := h.do(req{method: "POST", path: c.path, key: h.testKey, body: c.body})
		if r.status != 400 || r.errorCode(t) != "invalid_request" || !strings.Contains(string(r.body), "UTF-8") {
			t.Fatalf("%s %q: %d %s", c.path, c.body, r.status, r.body)
		}
	}
}

// TestCSVFormulaGuard: a results cell a spreadsheet would run as a formula,
// also behind leading blanks, is exported with a leading '.
func TestCSVFormulaGuard(t *testing.T) {
	h := start(t, options{realClock: true})
	emails := []string{" =1+1", "\t=HYPERLINK(\"http://x\")", "  @SUM(A1)", " -2+3", "\u00a0+cmd", "=direct", "alice@good.example", "a=b@good.example"}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"quick"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	h.poll(h.testKey, id, 20*time.Second)
	cr := h.do(req{path: "/v1/requests/" + id + "/results", key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
	rows, err := csv.NewReader(strings.NewReader(string(cr.body))).ReadAll()
	if err != nil || len(rows) != len(emails)+1 {
		t.Fatalf("csv: %v, %d rows: %s", err, len(rows), cr.body)
	}
	for i, row := range rows[1:] {
		want := emails[i]
		if i < 6 {
			want = "'" + want
		}
		if row[0] != want {
			t.Errorf("row %d: cell %q, want %q", i+1, row[0], want)
		}
	}
}

// TestInvalidNeverDuplicatesValid: an invalid entry that trims to a valid
// address is not that address's duplicate, whichever comes first.
func TestInvalidNeverDuplicatesValid(t *testing.T) {
	h := start(t, options{realClock: true})
	emails := []string{"alice@good.example\u00a0", "alice@good.example", "\u00a0bob@good.example", "bob@good.example", "bob@good.example"}
	// Full mode: there a test key answers a valid plain address deliverable
	// (in quick mode, unknown, as a live key does).
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e := decodeEnvelope(t, r)
	if e.Counters.Total != 5 || e.Counters.Duplicates != 1 {
		t.Fatalf("counters %+v, want 5 total and 1 duplicate (the second plain bob)", e.Counters)
	}
	done := h.poll(h.testKey, e.Request.ID, 20*time.Second)
	if done.Counters.Processed != 4 || done.Counters.Deliverable != 2 {
		t.Fatalf("counters %+v: both valid addresses must be verified", done.Counters)
	}
}
