package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The hostile scenario (contract, section 16): one account attacks as the
// issue's tester did — slow upload PUTs on every upload it may open, slow
// 6 MiB batch bodies, and a storm of CSV lists of a large batch of its own
// — while the victim, another account, runs the verify load. The ratio to
// the verify scenario of the same round says what the attack costs the
// victim.

// hostileRows is the attacker's batch, whose CSV it reads over and over.
const hostileRows = 50_000

// hostile is one account's attack on the server, running until stop.
type hostile struct {
	s      *stack
	key    string
	batch  string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// counts of what the server answered the attacker
	refused, served atomic.Int64
}

// prepareHostile makes the attacker's account and its batch.
func prepareHostile(ctx context.Context, s *stack) (*hostile, error) {
	key, err := s.account(ctx, "hostile", true)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for i := range hostileRows {
		fmt.Fprintf(&b, "u%d@d%d.example\n", i, i%100)
	}
	up, err := s.callAs(key, http.MethodPost, "/v1/uploads", `{"contentType":"text/csv"}`, nil)
	if err != nil {
		return nil, err
	}
	var u struct{ UploadID, URL string }
	if err := json.Unmarshal(up.body, &u); err != nil || u.URL == "" {
		return nil, fmt.Errorf("upload: %d %s", up.status, up.body)
	}
	req, _ := http.NewRequest(http.MethodPut, u.URL, strings.NewReader(b.String()))
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	r, err := s.callAs(key, http.MethodPost, "/v1/requests", `{"uploadId":"`+u.UploadID+`","mode":"quick"}`, nil)
	if err != nil {
		return nil, err
	}
	id, err := batchID(r)
	if err != nil {
		return nil, err
	}
	for {
		r, err := s.callAs(key, http.MethodGet, "/v1/requests/"+id, "", nil)
		if err != nil {
			return nil, err
		}
		if strings.Contains(string(r.body), `"state":"completed"`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &hostile{s: s, key: key, batch: id}, nil
}

// start begins the attack.
func (h *hostile) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	loop := func(n int, f func(ctx context.Context)) {
		for range n {
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				for ctx.Err() == nil {
					f(ctx)
				}
			}()
		}
	}
	// Slow PUTs: as many uploads as the account may open, two PUTs each
	// (the second is turned away while the first arrives), a megabyte and
	// then a byte a second.
	var uploads []string
	for range 12 {
		if r, err := h.s.callAs(h.key, http.MethodPost, "/v1/uploads", `{"contentType":"text/csv"}`, nil); err == nil && r.status == http.StatusCreated {
			var u struct{ URL string }
			if json.Unmarshal(r.body, &u) == nil {
				uploads = append(uploads, u.URL)
			}
		}
	}
	for _, url := range uploads {
		loop(2, func(ctx context.Context) { h.slowPut(ctx, url) })
	}
	// Slow 6 MiB batch bodies.
	loop(8, func(ctx context.Context) { h.slowBody(ctx) })
	// The CSV storm.
	loop(8, func(ctx context.Context) {
		r, err := h.csv(ctx)
		h.count(r, err)
	})
}

// stop ends the attack and waits for its connections to close.
func (h *hostile) stop() {
	h.cancel()
	h.wg.Wait()
}

func (h *hostile) count(status int, err error) {
	if err == nil && status < 300 {
		h.served.Add(1)
	} else {
		h.refused.Add(1)
		time.Sleep(100 * time.Millisecond) // as a client honouring Retry-After a little
	}
}

// slowPut sends a megabyte of list and then a byte a second.
func (h *hostile) slowPut(ctx context.Context, url string) {
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		if _, err := pw.Write([]byte("email\n" + strings.Repeat("a@x.example\n", 1<<20/12))); err != nil {
			return
		}
		for ctx.Err() == nil {
			if _, err := pw.Write([]byte("\n")); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, pr)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.count(resp.StatusCode, nil)
		return
	}
	h.count(0, err)
}

// slowBody announces a 6 MiB batch body and sends a kilobyte a second.
func (h *hostile) slowBody(ctx context.Context) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", h.s.evs)
	if err != nil {
		h.count(0, err)
		return
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	head := "POST /v1/requests HTTP/1.1\r\nHost: evs\r\nContent-Type: application/json\r\nX-Api-Key: " + h.key +
		"\r\nContent-Length: " + strconv.Itoa(6<<20) + "\r\n\r\n{\"emails\":["
	if _, err := io.WriteString(c, head); err != nil {
		h.count(0, err)
		return
	}
	chunk := strings.Repeat(`"a@x.example",`, 1<<10/14)
	for ctx.Err() == nil {
		if _, err := io.WriteString(c, chunk); err != nil {
			h.count(0, err) // the server closed it: refused or timed out
			return
		}
		time.Sleep(time.Second)
	}
}

// csv reads the attacker's batch as CSV, whole.
func (h *hostile) csv(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.s.evs+"/v1/requests/"+h.batch+"/results", nil)
	req.Header.Set("X-Api-Key", h.key)
	req.Header.Set("Accept", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// victimBatchN is the victim's batch in the hostile scenario.
const victimBatchN = 5_000

// victimBatch runs a test-mode batch of the victim to its end and returns
// how long it took from creation.
func (s *stack) victimBatch(ctx context.Context) (time.Duration, error) {
	emails := make([]string, victimBatchN)
	for i := range emails {
		emails[i] = fmt.Sprintf("v.%d.%d@d%d.example", time.Now().UnixNano(), i, i%50)
	}
	_, took, err := s.quickBatch(ctx, emails, 10*time.Millisecond)
	return took, err
}
