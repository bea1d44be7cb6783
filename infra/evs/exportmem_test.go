//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/evs-dev/evs/internal/testkit"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// exportRows is the batch the export storm reads: large enough that a
// list held whole (about 90 bytes a row) would stand out against the
// bound, small enough for make test.
const exportRows = 100_000

// TestServeMemoryBoundedUnderExportStorm: four exports and four CSV
// result lists of one large batch asked at once (each turned away with 429
// and Retry-After while the account's two heavy reads are taken, and asked
// again) are each read and written a page at a time: the server's peak
// resident memory stays under the bound, and every list is whole.
func TestServeMemoryBoundedUnderExportStorm(t *testing.T) {
	t.Parallel()
	bin := buildEVS(t)
	dir := t.TempDir()
	code, out, stderr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "sandbox", "--test")
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) {
		t.Fatalf("keys create: exit %d %q %q", code, out, stderr)
	}
	p := startServe(t, bin, []string{"EVS_DATA_DIR=" + dir, "EVS_SMTP=off", "EVS_SMTP_HELO=localhost", "EVS_RATE_LIMIT=off",
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")})
	pid := p.cmd.Process.Pid

	// The batch, through an upload.
	status, raw := call(t, key, "POST", p.base+"/v1/uploads", `{"contentType":"text/csv"}`)
	var up struct{ UploadID, URL string }
	if status != 201 || json.Unmarshal(raw, &up) != nil {
		t.Fatalf("create upload: %d %s", status, raw)
	}
	list := fill(1<<30, func(i int) string {
		if i >= exportRows {
			return strings.Repeat(" ", 1<<30) // stop
		}
		return fmt.Sprintf("u%d+accepted_email@d%d.example\n", i, i%50)
	})
	req, _ := http.NewRequest(http.MethodPut, up.URL, strings.NewReader(list))
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT the list: %v %v", resp, err)
	}
	resp.Body.Close()
	status, raw = call(t, key, "POST", p.base+"/v1/requests", `{"uploadId":"`+up.UploadID+`","mode":"quick"}`)
	var env struct{ Request struct{ ID, State string } }
	if status != 201 || json.Unmarshal(raw, &env) != nil {
		t.Fatalf("create batch: %d %s", status, raw)
	}
	id := env.Request.ID
	testkit.EventuallyEvery(t, 3*time.Minute, 200*time.Millisecond, func() error {
		if env.Request.State == "completed" {
			return nil
		}
		_, raw = call(t, key, "GET", p.base+"/v1/requests/"+id, "")
		_ = json.Unmarshal(raw, &env)
		return fmt.Errorf("batch not completed: %s", env.Request.State)
	})
	base := peakRSS(t, pid)
	// get asks until it is served: a list past the account's share is
	// refused with Retry-After, safe to retry.
	client := &http.Client{Timeout: 5 * time.Minute}
	get := func(u, accept string) ([]byte, error) {
		for {
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("X-Api-Key", key)
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				return nil, err
			case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && resp.Header.Get("Retry-After") != "":
				// A client's back-off: nothing tells it when the share
				// is free again.
				<-time.After(100 * time.Millisecond)
				continue
			case resp.StatusCode != 200:
				return nil, fmt.Errorf("%s: %d %.200s", u, resp.StatusCode, b)
			}
			return b, nil
		}
	}
	fetch := func(u string, csv bool) (int, error) {
		if csv {
			b, err := get(u, "text/csv")
			return strings.Count(string(b), "\n"), err
		}
		b, err := get(u, "")
		var link struct{ URL string }
		if err == nil {
			err = json.Unmarshal(b, &link)
		}
		if err != nil {
			return 0, err
		}
		b, err = get(link.URL, "")
		return strings.Count(string(b), "\n"), err
	}
	var wg sync.WaitGroup
	lines := make([]int, 8)
	errs := make([]error, 8)
	start := time.Now()
	for i := range lines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < 4 {
				lines[i], errs[i] = fetch(p.base+"/v1/requests/"+id+"/export", false)
			} else {
				lines[i], errs[i] = fetch(p.base+"/v1/requests/"+id+"/results", true)
			}
		}()
	}
	wg.Wait()
	peak := peakRSS(t, pid)
	t.Logf("%d-row batch: peak RSS %s before, %s during 4 exports and 4 CSV lists (%v)", exportRows, mib(base), mib(peak), time.Since(start).Round(time.Millisecond))
	for i := range lines {
		if errs[i] != nil || lines[i] != exportRows+1 {
			t.Errorf("list %d: %d lines (%v), want %d", i, lines[i], errs[i], exportRows+1)
		}
	}
	if peak > maxServeRSS {
		t.Errorf("peak RSS %s, want under %s", mib(peak), mib(maxServeRSS))
	}
}
