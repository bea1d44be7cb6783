package server_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// newUpload makes an upload for key and returns its id and URL.
func (h *harness) newUpload(key, contentType string) (id, putURL string) {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/uploads", key: key, body: `{"contentType":"` + contentType + `"}`})
	if r.status != 201 {
		h.t.Fatalf("create upload: %d %s", r.status, r.body)
	}
	m := r.json(h.t)
	id, _ = m["uploadId"].(string)
	putURL, _ = m["url"].(string)
	if m["method"] != "PUT" || m["maxBytes"] != float64(100<<20) || id == "" {
		h.t.Fatalf("upload reply: %s", r.body)
	}
	return id, putURL
}

// put sends body to an upload URL as a client would: no API key. The
// reply is checked against the contract like every other.
func (h *harness) put(putURL, contentType string, body io.Reader) reply {
	h.t.Helper()
	hr, err := http.NewRequest(http.MethodPut, putURL, body)
	if err != nil {
		h.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		h.t.Fatalf("PUT: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
	h.contract.check(h.t, hr, "", out)
	return out
}

// TestUploadFlow walks the three steps of a large list on `evs serve`:
// make an upload, PUT the list to its URL (no key: the URL's token is the
// credential), create the batch from it; and every refusal on the way.
func TestUploadFlow(t *testing.T) {
	h := start(t, options{realClock: true})
	id, putURL := h.newUpload(h.testKey, "text/csv")
	if !strings.HasPrefix(putURL, h.base+"/v1/uploads/"+id+"?token=") {
		t.Fatalf("url %q is not this server's upload URL", putURL)
	}
	create := func(key, uploadID string, hdr map[string]string) reply {
		return h.do(req{method: "POST", path: "/v1/requests", key: key, headers: hdr,
			body: `{"uploadId":"` + uploadID + `","mode":"quick"}`})
	}
	if r := create(h.testKey, id, nil); r.status != 409 || r.errorCode(t) != "invalid_state" || !strings.Contains(string(r.body), "Nothing was uploaded yet") {
		t.Fatalf("create before PUT: %d %s", r.status, r.body)
	}

	csv := "email,name\n"
	for i := range 300 {
		csv += fmt.Sprintf("user%d@x%d.example,n\n", i, i%7)
	}
	csv += "rejected_email@x.example,r\nuser1@X1.EXAMPLE,dup\n"

	u, _ := url.Parse(putURL)
	wrong := *u
	wrong.RawQuery = "token=" + strings.Repeat("A", 43)
	for _, tc := range []struct {
		name, url, ct string
		status        int
		code          string
	}{
		{"wrong token", wrong.String(), "text/csv", 404, "not_found"},
		{"no token", h.base + u.Path, "text/csv", 404, "not_found"},
		{"unknown upload", h.base + "/v1/uploads/6d1c0000-0000-4000-8000-000000000000?" + u.RawQuery, "text/csv", 404, "not_found"},
		{"other content type", putURL, "application/json", 400, "invalid_request"},
	} {
		r := h.put(tc.url, tc.ct, strings.NewReader(csv))
		if r.status != tc.status || r.errorCode(t) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	// A first PUT is replaced by the second, as on S3.
	if r := h.put(putURL, "text/csv", strings.NewReader("someone@else.example\n")); r.status != 200 {
		t.Fatalf("first PUT: %d %s", r.status, r.body)
	}
	r := h.put(putURL, "text/csv; charset=utf-8", strings.NewReader(csv))
	if r.status != 200 || r.json(t)["bytes"] != float64(len(csv)) {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}

	// Another account's upload is answered like one that does not exist.
	if r := create(h.otherKey, id, nil); r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("other account: %d %s", r.status, r.body)
	}
	if r := create(h.testKey, "not-a-uuid", nil); r.status != 400 {
		t.Fatalf("bad uploadId: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `","emails":["a@x.example"]}`}); r.status != 400 {
		t.Fatalf("emails and uploadId: %d %s", r.status, r.body)
	}

	r = create(h.testKey, id, map[string]string{"Idempotency-Key": "from-upload"})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e := decodeEnvelope(t, r)
	if e.Counters.Total != 302 || e.Counters.Duplicates != 1 || e.Request.Mode != "quick" {
		t.Fatalf("created: %s", r.body)
	}
	final := h.poll(h.testKey, e.Request.ID, 30*time.Second)
	if final.Request.State != "completed" || final.Counters.Processed != 301 || final.Counters.Undeliverable != 1 {
		t.Fatalf("final: %+v", final)
	}

	// The same key replays; another creation from the upload is refused
	// and names the batch it made; so is another PUT.
	if r := create(h.testKey, id, map[string]string{"Idempotency-Key": "from-upload"}); r.status != 200 || decodeEnvelope(t, r).Request.ID != e.Request.ID {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if r := create(h.testKey, id, nil); r.status != 409 || r.errorCode(t) != "invalid_state" || !strings.Contains(string(r.body), e.Request.ID) {
		t.Fatalf("second creation: %d %s", r.status, r.body)
	}
	if r := h.put(putURL, "text/csv", strings.NewReader(csv)); r.status != 409 {
		t.Fatalf("PUT after use: %d %s", r.status, r.body)
	}
}

// TestUploadLimits: a list over the address limit makes a batch created
// failed with the reason; a body over 100 MiB is refused before it is
// read when its length is announced, and once read past the limit when it
// is not; a list that is not a list is 400.
func TestUploadLimits(t *testing.T) {
	t.Parallel() // long, on a harness of its own: it runs beside the others so marked
	h := start(t, options{realClock: true, server: func(o *server.Options) { o.MaxUploadAddresses = 100 }})
	id, putURL := h.newUpload(h.testKey, "application/json")
	var b strings.Builder
	b.WriteString(`{"emails":[`)
	for i := range 101 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"u%d@x.example"`, i)
	}
	b.WriteString(`]}`)
	if r := h.put(putURL, "application/json", strings.NewReader(b.String())); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	e := decodeEnvelope(t, r)
	if r.status != 201 || e.Request.State != "failed" || !strings.Contains(e.Request.Error, "more than 100 addresses") || e.Request.CompletedAt == "" {
		t.Fatalf("over the address limit: %d %s", r.status, r.body)
	}

	// 100 addresses exactly is a list like any other.
	id, putURL = h.newUpload(h.testKey, "text/csv")
	var lines strings.Builder
	for i := range 100 {
		fmt.Fprintf(&lines, "u%d@x.example\n", i)
	}
	h.put(putURL, "text/csv", strings.NewReader(lines.String()))
	r = h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	if e := decodeEnvelope(t, r); r.status != 201 || e.Request.State != "queued" || e.Counters.Total != 100 {
		t.Fatalf("at the limit: %d %s", r.status, r.body)
	}

	// Not a list: 400, and the upload can be sent again and used.
	id, putURL = h.newUpload(h.testKey, "text/csv")
	h.put(putURL, "text/csv", strings.NewReader("\xff\xfea\x00@\x00"))
	r = h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	if r.status != 400 || !strings.Contains(string(r.body), "UTF-16") {
		t.Fatalf("UTF-16 upload: %d %s", r.status, r.body)
	}

	// Over 100 MiB, announced: refused before a byte is read.
	_, putURL = h.newUpload(h.testKey, "text/csv")
	hr, _ := http.NewRequest(http.MethodPut, putURL, io.LimitReader(zeros{}, 100<<20+1))
	hr.ContentLength = 100<<20 + 1
	hr.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("announced 100 MiB + 1: %d", resp.StatusCode)
	}
	// Not announced (chunked): read to the limit, then refused, nothing kept.
	id, putURL = h.newUpload(h.testKey, "text/csv")
	if r := h.put(putURL, "text/csv", io.MultiReader(strings.NewReader("a@x.example\n"), io.LimitReader(zeros{}, 100<<20))); r.status != 413 || r.errorCode(t) != "payload_too_large" {
		t.Fatalf("chunked 100 MiB + 12: %d %s", r.status, r.body)
	}
	r = h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	if r.status != 409 {
		t.Fatalf("create from a refused PUT: %d %s", r.status, r.body)
	}
}

// zeros reads spaces: a body of any size without holding it.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// TestUploadExpires: after an hour neither the URL nor the ID works.
func TestUploadExpires(t *testing.T) {
	h := start(t, options{})
	id, putURL := h.newUpload(h.testKey, "text/csv")
	if r := h.put(putURL, "text/csv", strings.NewReader("a@x.example\n")); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	h.clock.Advance(time.Hour + time.Second)
	if r := h.put(putURL, "text/csv", strings.NewReader("a@x.example\n")); r.status != 404 {
		t.Fatalf("PUT after expiry: %d %s", r.status, r.body)
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	if r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("create after expiry: %d %s", r.status, r.body)
	}
}

// dripBody sends first at once, then one byte every every, until stop.
type dripBody struct {
	first []byte
	every time.Duration
	stop  <-chan struct{}
}

func (d *dripBody) Read(p []byte) (int, error) {
	if len(d.first) > 0 {
		n := copy(p, d.first)
		d.first = d.first[n:]
		return n, nil
	}
	select {
	case <-time.After(d.every):
		p[0] = 'a'
		return 1, nil
	case <-d.stop:
		return 0, io.EOF
	}
}

// TestUploadMinimumRate: an upload PUT that sends a lot at once and then a
// byte now and then (the slow-PUT flood of contract section 16) is cut off
// within a window of the minimum rate, not held for the upload's ten
// minutes; one that keeps the rate completes.
func TestUploadMinimumRate(t *testing.T) {
	const window = 500 * time.Millisecond // UploadMinRate × window: 8 KiB
	h := start(t, options{realClock: true, server: func(o *server.Options) { o.UploadWindow = window }})

	_, putURL := h.newUpload(h.testKey, "text/csv")
	stop := make(chan struct{})
	defer close(stop)
	hr, err := http.NewRequest(http.MethodPut, putURL, &dripBody{first: []byte("email\n" + strings.Repeat("a@x.example\n", 1000)), every: 100 * time.Millisecond, stop: stop})
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "text/csv")
	// The body never ends (until the test does): only the server's cut-off
	// ends the call.
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{status: resp.StatusCode, body: b}
	}()
	a := testkit.Receive(t, answered, 60*time.Second, fmt.Sprintf("the server to cut off a drip-fed upload (the window is %v, the upload's limit ten minutes)", window))
	// The client may see the reply, or only the closed connection.
	if a.err == nil && (a.status != 400 || !strings.Contains(string(a.body), "invalid_request")) {
		t.Fatalf("a drip-fed upload: %d %s, want 400 invalid_request", a.status, a.body)
	}

	// Steady: 16 KiB every 250 ms (four times the rate), past several
	// windows.
	_, putURL = h.newUpload(h.testKey, "text/csv")
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, "email\n")
		line := strings.Repeat("b@x.example\n", 16<<10/12)
		pace := time.NewTicker(window / 2)
		defer pace.Stop()
		for range 6 {
			_, _ = io.WriteString(pw, line)
			<-pace.C
		}
		pw.Close()
	}()
	if r := h.put(putURL, "text/csv", pr); r.status != 200 {
		t.Fatalf("a steady upload: %d %s\n%s", r.status, r.body, h.logs)
	}
}

// TestUploadOpenCap: an account holds at most api.MaxOpenUploads open
// uploads (contract, section 16); one more is 429 rate_limited with the
// seconds until the oldest expires and what to do, and nothing is made.
// Creating a batch from an upload frees its place at once, and another
// account is not affected.
func TestUploadOpenCap(t *testing.T) {
	h := start(t, options{})
	var ids, urls []string
	for range api.MaxOpenUploads {
		id, putURL := h.newUpload(h.testKey, "text/csv")
		ids, urls = append(ids, id), append(urls, putURL)
		h.clock.Advance(time.Minute)
	}
	full := func(what string, retry int) {
		t.Helper()
		r := h.do(req{method: "POST", path: "/v1/uploads", key: h.testKey, body: `{"contentType":"text/csv"}`})
		if r.status != 429 || r.errorCode(t) != "rate_limited" {
			t.Fatalf("%s: %d %s, want 429 rate_limited", what, r.status, r.body)
		}
		if got := r.header.Get("Retry-After"); got != fmt.Sprint(retry) {
			t.Errorf("%s: Retry-After %q, want %d (until the oldest open upload expires)", what, got, retry)
		}
		if msg := string(r.body); !strings.Contains(msg, "uploadId") || !strings.Contains(msg, fmt.Sprint(api.MaxOpenUploads)) {
			t.Errorf("%s: the message says neither the cap nor what to do: %s", what, msg)
		}
	}
	// Ten minutes have gone; the oldest expires an hour after it was made.
	full("one upload too many", int((api.UploadTTL - time.Duration(api.MaxOpenUploads)*time.Minute).Seconds()))
	// The refusal is not kept under an Idempotency-Key: it is about now.
	r := h.do(req{method: "POST", path: "/v1/uploads", key: h.testKey, body: `{"contentType":"text/csv"}`, headers: map[string]string{"Idempotency-Key": "cap"}})
	if r.status != 429 {
		t.Fatalf("keyed creation at the cap: %d %s", r.status, r.body)
	}
	// Another account has places of its own.
	h.newUpload(h.otherKey, "text/csv")

	// Using an upload frees its place: one more, then full again.
	if r := h.put(urls[3], "text/csv", strings.NewReader("a@x.example\n")); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	r = h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + ids[3] + `","mode":"quick"}`})
	if r.status != 201 {
		t.Fatalf("create from an upload: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/uploads", key: h.testKey, body: `{"contentType":"text/csv"}`, headers: map[string]string{"Idempotency-Key": "cap"}}); r.status != 201 {
		t.Fatalf("creation after one was used (same key as the refused call): %d %s", r.status, r.body)
	}
	full("at the cap again", int((api.UploadTTL - time.Duration(api.MaxOpenUploads)*time.Minute).Seconds()))

	// So does an expiry: the oldest goes, the next oldest sets Retry-After.
	h.clock.Advance(api.UploadTTL - time.Duration(api.MaxOpenUploads)*time.Minute)
	h.newUpload(h.testKey, "text/csv")
	full("full after an expiry", 60)
}

// TestUploadOnePutAtATime: while an upload's list is arriving, a second
// PUT to its URL is answered 409 invalid_state at once, unread, so an
// account holds at most one PUT per open upload; once the first has
// ended, the list can be sent again.
func TestUploadOnePutAtATime(t *testing.T) {
	h := start(t, options{realClock: true})
	// The first PUT asks for 100 Continue: its client sends the body only
	// once the server has started to read it, so once the first line is
	// taken the server is receiving this upload.
	_, putURL := h.newUpload(h.testKey, "text/csv")
	pr, pw := io.Pipe()
	defer pw.Close()
	hr, err := http.NewRequest(http.MethodPut, putURL, pr)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "text/csv")
	hr.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Hour}}
	defer client.CloseIdleConnections()
	first := make(chan reply, 1)
	go func() {
		resp, err := client.Do(hr)
		if err != nil {
			first <- reply{body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		first <- reply{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	if _, err := io.WriteString(pw, "email\na@x.example\n"); err != nil {
		t.Fatal(err)
	}
	second := h.put(putURL, "text/csv", strings.NewReader("email\nb@x.example\n"))
	pw.Close()
	r := testkit.Receive(t, first, 20*time.Second, "the first PUT's reply")
	if r.status != 0 {
		h.contract.check(t, hr, "", r)
	}
	if second.status != http.StatusConflict || second.errorCode(t) != "invalid_state" {
		t.Fatalf("a second PUT while the first arrives: %d %s", second.status, second.body)
	}
	if r.status != http.StatusOK {
		t.Fatalf("the first PUT: %d %s", r.status, r.body)
	}
	if r := h.put(putURL, "text/csv", strings.NewReader("email\nc@x.example\n")); r.status != http.StatusOK {
		t.Fatalf("a PUT after the first ended: %d %s", r.status, r.body)
	}
}

// TestUploadAborted: a client that closes its connection halfway through
// an upload's PUT is answered (if it still listens) as a client error, not
// logged as our fault (ERROR, 500), and nothing of the list is kept.
func TestUploadAborted(t *testing.T) {
	h := start(t, options{realClock: true})
	id, putURL := h.newUpload(h.testKey, "text/csv")
	u, err := url.Parse(putURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	part := "email\n" + strings.Repeat("a@x.example\n", 4000)
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Type: text/csv\r\nContent-Length: %d\r\n\r\n%s", u.RequestURI(), u.Host, 10*len(part), part)
	conn.Close()
	line := h.logs.Await(t, 10*time.Second, "the PUT's call line", func(s string) bool {
		return strings.Contains(s, `"method":"PUT"`)
	})
	for _, l := range strings.Split(line, "\n") {
		if strings.Contains(l, `"method":"PUT"`) && (strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"status":500`)) {
			t.Errorf("an aborted upload is logged as our fault: %s", l)
		}
	}
	// The upload holds no list: a batch from it is refused.
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`})
	if r.status < 400 || r.status >= 500 {
		t.Errorf("a batch from an aborted upload: %d %s, want a 4xx", r.status, r.body)
	}
}
