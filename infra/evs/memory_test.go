//go:build linux

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxServeRSS is the bound on `evs serve`'s peak resident memory while it
// reads hostile bodies: eight 6 MiB bodies at once must fit in a small
// container with room to spare.
const maxServeRSS = 256 << 20

// bodyShape is a hostile way to fill a 6 MiB body.
type bodyShape struct {
	name string
	// upload: the body is PUT to an upload's URL instead of POSTed to
	// path (default /v1/requests).
	upload      bool
	path        string
	contentType string
	body        func() string
	want        int // the status of the call when it is alone
}

// fill repeats line(i) for i = 0, 1, … while the next one still fits in
// size bytes.
func fill(size int, line func(i int) string) string {
	var b strings.Builder
	b.Grow(size)
	for i := 0; ; i++ {
		l := line(i)
		if b.Len()+len(l) > size {
			return b.String()
		}
		b.WriteString(l)
	}
}

// nearLimit is a body size just under the batch body limit (6 MiB).
const nearLimit = 6<<20 - 4096

func hostileShapes() []bodyShape {
	junk := strings.Repeat("x", 90)
	return []bodyShape{
		{name: "csv/one address and six million commas", contentType: "text/csv", want: 400,
			body: func() string { return "a@x.example" + strings.Repeat(",", nearLimit-11) }},
		{name: "csv/one enormous quoted field", contentType: "text/csv", want: 400,
			body: func() string { return `"` + strings.Repeat("a", nearLimit-2) + `"` }},
		{name: "csv/short lines with long trailing fields", contentType: "text/csv", want: 201,
			body: func() string {
				tail := strings.Repeat("y", 4000)
				return fill(nearLimit, func(i int) string { return fmt.Sprintf("u%d@d%d.example,%s\n", i, i%50, tail) })
			}},
		{name: "csv/50,000 addresses with junk columns", contentType: "text/csv", want: 201,
			body: func() string {
				return fill(nearLimit, func(i int) string {
					if i >= 50000 {
						return strings.Repeat(" ", nearLimit) // stop
					}
					return fmt.Sprintf("u%d@d%d.example,%s,%d\n", i, i%50, junk, i)
				})
			}},
		{name: "csv/CR-only line endings", contentType: "text/csv", want: 201,
			body: func() string {
				return fill(nearLimit, func(i int) string {
					if i >= 50000 {
						return strings.Repeat(" ", nearLimit)
					}
					return fmt.Sprintf("u%d@d%d.example,%s\r", i, i%50, junk)
				})
			}},
		{name: "json/array of ones", contentType: "application/json", want: 400,
			body: func() string {
				return `{"emails":[1` + strings.Repeat(",1", (nearLimit-16)/2) + `]}`
			}},
		{name: "json/array of huge strings", contentType: "application/json", want: 400,
			body: func() string {
				s := `"` + strings.Repeat("a", 60<<10) + `"`
				return `{"emails":[` + s + strings.Repeat(","+s, nearLimit/len(s)-1) + `]}`
			}},
		{name: "json/deeply nested arrays and objects", contentType: "application/json", want: 400,
			body: func() string {
				n := (nearLimit - 16) / 8
				return `{"emails":[` + strings.Repeat(`[{"a":`, n) + "1" + strings.Repeat("}]", n) + `]}`
			}},
		{name: "json/50,000 addresses", contentType: "application/json", want: 201,
			body: func() string {
				pad := strings.Repeat(" ", 80) // whitespace fills the body to 6 MiB
				var b strings.Builder
				b.WriteString(`{"mode":"quick","emails":[`)
				for i := 0; i < 50000; i++ {
					if i > 0 {
						b.WriteString("," + pad)
					}
					fmt.Fprintf(&b, `"u%d@d%d.example"`, i, i%50)
				}
				b.WriteString("]}")
				return b.String()
			}},
		{name: "outcomes/csv of one row of commas", path: "/v1/outcomes", contentType: "text/csv", want: 400,
			body: func() string { return strings.Repeat(",", nearLimit) }},
		{name: "outcomes/csv header then one row of commas", path: "/v1/outcomes", contentType: "text/csv", want: 400,
			body: func() string { return "email,outcome,at\n" + strings.Repeat(",", nearLimit-17) }},
		{name: "outcomes/json array of empty objects", path: "/v1/outcomes", contentType: "application/json", want: 400,
			body: func() string { return `{"outcomes":[{}` + strings.Repeat(",{}", (nearLimit-20)/3) + `]}` }},
		{name: "outcomes/json 50,000 outcomes", path: "/v1/outcomes", contentType: "application/json", want: 200,
			body: func() string {
				var b strings.Builder
				b.WriteString(`{"outcomes":[`)
				for i := 0; i < 50000; i++ {
					if i > 0 {
						b.WriteString(",")
					}
					fmt.Fprintf(&b, `{"email":"u%d@d%d.example","outcome":"bounced","bounceType":"hard","at":"2026-01-02T03:04:05Z"}`, i, i%50)
				}
				b.WriteString("]}")
				return b.String()
			}},
		{name: "upload/24 MiB list", upload: true, contentType: "text/csv", want: 200,
			body: func() string {
				return fill(24<<20, func(i int) string { return fmt.Sprintf("user%d@d%d.example\n", i, i%50) })
			}},
	}
}

// TestServeMemoryBoundedUnderHostileBodies starts the real `evs serve`
// (built without the race detector, whose shadow memory would hide what
// the server itself uses), sends it each hostile body alone and then eight
// at once, while a loop of /v1/verify calls must keep answering 200, and
// bounds the server's peak resident memory (VmHWM) for each shape. Each
// shape has its own process, whose peak the others' do not touch: they
// run in parallel.
func TestServeMemoryBoundedUnderHostileBodies(t *testing.T) {
	t.Parallel()
	bin := buildEVS(t)
	client := &http.Client{Timeout: 5 * time.Minute}
	for _, shape := range hostileShapes() {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			body := shape.body()
			// A fresh process and data directory per shape: its peak is
			// this shape's alone, not that of batches an earlier shape
			// left running.
			dir := t.TempDir()
			code, out, stderr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "sandbox", "--test")
			key := strings.TrimSpace(out)
			if code != 0 || !keyRE.MatchString(key) {
				t.Fatalf("keys create: exit %d %q %q", code, out, stderr)
			}
			p := startServe(t, bin, []string{
				"EVS_DATA_DIR=" + dir,
				"EVS_SMTP=off",
				"EVS_SMTP_HELO=localhost",
				"EVS_RATE_LIMIT=off",
				"EVS_MAX_ACTIVE_BATCHES=10000",
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + os.Getenv("HOME"),
			})
			pid := p.cmd.Process.Pid
			base := peakRSS(t, pid)

			if status, _ := sendShape(t, client, p.base, key, shape, body); status != shape.want {
				t.Fatalf("alone: status %d, want %d", status, shape.want)
			}
			alone := peakRSS(t, pid)

			stop := make(chan struct{})
			verifies := make(chan error, 1)
			var calls atomic.Int64
			go func() { verifies <- verifyLoop(client, p.base, key, stop, &calls) }()
			var wg sync.WaitGroup
			statuses := make([]int, 8)
			headers := make([]http.Header, 8)
			for i := range statuses {
				wg.Add(1)
				go func() {
					defer wg.Done()
					statuses[i], headers[i] = sendShape(t, client, p.base, key, shape, body)
				}()
			}
			wg.Wait()
			close(stop)
			if err := <-verifies; err != nil {
				t.Errorf("while eight bodies were read: %v", err)
			}
			eight := peakRSS(t, pid)
			t.Logf("peak RSS: idle %s, one body %s, eight at once %s (statuses %v, %d verify calls meanwhile)",
				mib(base), mib(alone), mib(eight), statuses, calls.Load())
			served := 0
			for i, s := range statuses {
				switch {
				case s == shape.want:
					served++
				case (s == http.StatusServiceUnavailable || s == http.StatusTooManyRequests) && headers[i].Get("Retry-After") != "":
					// Turned away after waiting its turn: 503 when the
					// server's budget of bodies is spent, 429 when this
					// one account's half of it is (all eight are its).
				default:
					t.Errorf("call %d of eight: status %d, want %d (or 503 or 429 with Retry-After)", i, s, shape.want)
				}
			}
			if served == 0 {
				t.Errorf("none of the eight calls was served: %v", statuses)
			}
			if alone > maxServeRSS || eight > maxServeRSS {
				t.Errorf("peak RSS %s (one) and %s (eight), want both under %s", mib(alone), mib(eight), mib(maxServeRSS))
			}
		})
	}
}

// sendShape sends body as shape says and returns the status and headers.
func sendShape(t *testing.T, client *http.Client, base, key string, shape bodyShape, body string) (int, http.Header) {
	u := base + cmp.Or(shape.path, "/v1/requests")
	method := http.MethodPost
	if shape.upload {
		status, raw := call(t, key, "POST", base+"/v1/uploads", `{"contentType":"`+shape.contentType+`"}`)
		var up struct{ URL string }
		if status != 201 || json.Unmarshal(raw, &up) != nil {
			t.Errorf("create upload: %d %s", status, raw)
			return status, nil
		}
		u, method = up.URL, http.MethodPut
	}
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", shape.contentType)
	if !shape.upload {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, u, err)
		return 0, nil
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// verifyLoop calls /v1/verify every 5 ms until stop is closed (at least
// once) and returns the first call that did not answer 200. Paced as a
// busy client is: calls back to back spent half the test's CPU on
// themselves, taking it from the bodies they are to be served beside.
func verifyLoop(client *http.Client, base, key string, stop <-chan struct{}, calls *atomic.Int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequest("POST", base+"/v1/verify", strings.NewReader(`{"email":"accepted_email@x.example","mode":"quick"}`))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		calls.Add(1)
		if resp.StatusCode != 200 {
			return fmt.Errorf("verify: status %d %s", resp.StatusCode, raw)
		}
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}

// peakRSS reads the process's peak resident set (VmHWM) and resets it, so
// the next reading is the peak since this one.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var kb int64 = -1
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
		}
	}
	if kb < 0 {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	// "5" resets the peak to the current resident set (proc(5)).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
	return kb << 10
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
