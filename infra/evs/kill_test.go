package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// batchEnvelope is the part of the batch envelope (contract section 3) the
// kill test checks.
type batchEnvelope struct {
	Request struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Error string `json:"error"`
	} `json:"request"`
	Counters struct {
		Total         int `json:"total"`
		Duplicates    int `json:"duplicates"`
		Processed     int `json:"processed"`
		Deliverable   int `json:"deliverable"`
		Undeliverable int `json:"undeliverable"`
		Risky         int `json:"risky"`
		Unknown       int `json:"unknown"`
	} `json:"counters"`
}

type resultRow struct {
	Email  string `json:"email"`
	Status string `json:"status"`
}

// evsProc is one `evs serve` subprocess.
type evsProc struct {
	cmd  *exec.Cmd
	base string
	out  *testkit.LogBuffer
	err  *testkit.LogBuffer
	done chan struct{} // closed once Wait has returned
}

// TestServeKilledMidBatch SIGKILLs a real `evs serve` process while a batch
// runs, starts it again on the same data directory, and checks the contract's
// promise for batches: nothing lost, nothing counted twice, counters never
// go down, and a results cursor taken before the crash still reads the rest
// without skipping or repeating.
func TestServeKilledMidBatch(t *testing.T) {
	bin := buildEVS(t)

	const domains = 10
	// d0 has its own MX name, so the prober's per-host connection slots
	// (four per MX name) held by the other domains never keep it waiting;
	// the other nine share one MX. Every MX is the one scripted server.
	dns := testkit.StartDNS(t)
	dns.AddRecord("d0.example. 300 IN MX 10 mx0.farm.example.")
	dns.AddRecord("mx0.farm.example. 300 IN A 127.0.0.1")
	for i := 1; i < domains; i++ {
		dns.AddRecord(fmt.Sprintf("d%d.example. 300 IN MX 10 mx.farm.example.", i))
	}
	dns.AddRecord("mx.farm.example. 300 IN A 127.0.0.1")
	// The server answers every RCPT for d0, so the batch's first address
	// (user0@d0) gets its result; of the other domains' RCPTs it answers
	// the first 100 and holds the rest until the test releases them after
	// the kill. 1,620 addresses are on those domains, so the first process
	// cannot finish the batch, however fast this machine is.
	gate := testkit.NewRcptGate(100)
	smtp := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.1", Rcpt: func(addr string) string {
		gate.Wait(strings.HasSuffix(strings.ToLower(addr), "@d0.example"))
		local := strings.ToLower(addr[:max(strings.LastIndexByte(addr, '@'), 0)])
		// The engine's accept-all probe uses a random "evs-" local part;
		// rejecting it keeps the domains ordinary so 250 means deliverable.
		if strings.HasPrefix(local, "evs-") || strings.HasPrefix(local, "gone") {
			return "550 5.1.1 user unknown"
		}
		return "250 2.1.5 OK"
	}})
	// Cleanups run last first: the held sessions are let go before the
	// server's own cleanup waits for them to end.
	t.Cleanup(gate.Release)

	// 1,800 distinct addresses, every tenth one unknown to the server,
	// then 200 repeats of earlier ones.
	var emails []string
	want := map[string]string{} // address → expected status
	for i := 0; i < 1800; i++ {
		local := fmt.Sprintf("user%d", i)
		status := "deliverable"
		if i%10 == 3 {
			local, status = fmt.Sprintf("gone%d", i), "undeliverable"
		}
		e := fmt.Sprintf("%s@d%d.example", local, i%domains)
		emails = append(emails, e)
		want[e] = status
	}
	for i := 0; i < 200; i++ {
		emails = append(emails, emails[i*7])
	}
	distinct := len(want)

	dir := t.TempDir()
	key := createLiveKey(t, dir)
	env := liveEnv(dir, dns.Addr, smtp.Port)

	p1 := startServe(t, bin, env)
	body, _ := json.Marshal(map[string]any{"emails": emails, "mode": "full"})
	status, raw := call(t, key, "POST", p1.base+"/v1/requests", string(body))
	if status != 201 {
		t.Fatalf("create batch: %d %s", status, raw)
	}
	var createdEnv batchEnvelope
	if err := json.Unmarshal(raw, &createdEnv); err != nil {
		t.Fatalf("create batch: %v: %s", err, raw)
	}
	id := createdEnv.Request.ID
	var prev *batchEnvelope
	checkBatch(t, createdEnv, prev, distinct)
	prev = &createdEnv

	// Kill only once both are true: results can be read through the API
	// (a page stops at the first address still pending), and the SMTP
	// server holds at least one RCPT unanswered. A held RCPT stays
	// unanswered until the release below, after the process is dead, so
	// the batch cannot finish before the kill. The results read so far,
	// and the cursor after them, are carried across the restart.
	var before []resultRow
	var cursor string
	testkit.Eventually(t, 15*time.Second, func() error {
		e := getBatch(t, key, p1.base, id)
		checkBatch(t, e, prev, distinct)
		prev = &e
		if e.Request.State != "queued" && e.Request.State != "running" {
			t.Fatalf("the batch ended (%s, %d processed) while the SMTP server held %d RCPTs", e.Request.State, e.Counters.Processed, gate.Held())
		}
		if e.Counters.Processed > 0 && gate.Held() > 0 {
			if before, cursor = readResults(t, key, p1.base, id, "", false); len(before) > 0 {
				return nil
			}
		}
		return fmt.Errorf("not ready to kill after the batch was created (%d RCPTs held): %+v\nserve stderr:\n%s", gate.Held(), e, p1.err.String())
	})
	last := getBatch(t, key, p1.base, id)
	checkBatch(t, last, prev, distinct)
	prev = &last
	if last.Request.State != "running" || last.Counters.Processed >= distinct {
		t.Fatalf("batch %s with %d of %d processed just before the kill; want running and unfinished", last.Request.State, last.Counters.Processed, distinct)
	}
	if err := p1.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	<-p1.done
	held := gate.Held()
	// Held means unanswered: no held RCPT had timed out (after the
	// prober's reply timeout) into an "unknown" verdict by the kill.
	if held == 0 || last.Counters.Unknown != 0 {
		t.Fatalf("at the kill %d RCPTs were held and the batch had %d unknown verdicts; want some held, none timed out (reply timeout %v)", held, last.Counters.Unknown, smtpprobe.DefaultReplyTimeout)
	}
	gate.Release()
	if ws, ok := p1.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("serve was not killed by SIGKILL: %v", p1.cmd.ProcessState)
	}

	p2 := startServe(t, bin, env)
	var final batchEnvelope
	polls := 0
	testkit.EventuallyEvery(t, 60*time.Second, 50*time.Millisecond, func() error {
		final = getBatch(t, key, p2.base, id)
		checkBatch(t, final, prev, distinct)
		prev = &final
		if polls++; polls == 1 {
			t.Logf("killed with %d of %d distinct addresses processed by the last poll and %d RCPTs held, %d stored at restart, %d results read before the kill",
				last.Counters.Processed, distinct, held, final.Counters.Processed, len(before))
		}
		if final.Request.State == "completed" {
			return nil
		}
		if final.Request.State != "queued" && final.Request.State != "running" {
			t.Fatalf("after restart the batch ended %s (%s): %+v\nserve stderr:\n%s", final.Request.State, final.Request.Error, final.Counters, p2.err.String())
		}
		return fmt.Errorf("not completed after the restart: %+v\nserve stderr:\n%s", final, p2.err.String())
	})
	c := final.Counters
	if c.Total != len(emails) || c.Duplicates != 200 || c.Processed != distinct {
		t.Fatalf("final counters %+v; want total %d, duplicates 200, processed %d", c, len(emails), distinct)
	}

	all, _ := readResults(t, key, p2.base, id, "", true)
	checkResults(t, "all pages after the restart", all, want, final)
	rest, _ := readResults(t, key, p2.base, id, cursor, true)
	checkResults(t, "pages before the kill plus the cursor's rest", append(before, rest...), want, final)
}

// createLiveKey makes a live account and its key in the data directory dir
// with `evs keys create`, and returns the key.
func createLiveKey(t *testing.T, dir string) string {
	t.Helper()
	code, out, stderr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "live")
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) {
		t.Fatalf("keys create: exit %d %q %q", code, out, stderr)
	}
	return key
}

// liveEnv is the environment of an `evs serve` on the data directory dir
// that probes live over loopback: DNS from dnsAddr, SMTP on smtpPort; extra
// variables are added.
func liveEnv(dir, dnsAddr string, smtpPort int, extra ...string) []string {
	return append([]string{
		"EVS_DATA_DIR=" + dir,
		"EVS_DNS_SERVERS=" + dnsAddr,
		"EVS_SMTP=direct",
		fmt.Sprintf("EVS_SMTP_PORT=%d", smtpPort),
		"EVS_EGRESS_ALLOW=127.0.0.0/8", // the SMTP peer is on loopback
		// serve checks that the HELO name resolves through the system
		// resolver; "localhost" is answered from /etc/hosts, so the test
		// sends no DNS query off the machine.
		"EVS_SMTP_HELO=localhost",
		"EVS_RATE_LIMIT=off",
		// Every domain's mail host is the one loopback peer, one small
		// "provider" that politeness would pace at 2 sessions and 60 RCPT
		// a minute: these tests are about other things than the pacing.
		"EVS_PROVIDER_SESSIONS=64", "EVS_PROVIDER_RCPT_PER_MIN=1000000",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
	}, extra...)
}

// buildEVS builds this command, once for all the tests: a test must kill a
// separate process, which an in-process run cannot give.
func buildEVS(t *testing.T) string {
	t.Helper()
	return builds.Build(t, "evs", func(out string) *exec.Cmd { return exec.Command("go", "build", "-o", out, ".") })
}

// builds holds the evs binary, built once for the package's tests
// (TestMain removes it).
var builds testkit.Builds

// startServe starts `evs serve args...` on a free loopback port and waits
// until it says it is listening. The process is killed when the test ends.
func startServe(t *testing.T, bin string, env []string, args ...string) *evsProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &evsProc{
		cmd:  exec.Command(bin, append([]string{"serve"}, args...)...),
		base: "http://" + addr,
		out:  &testkit.LogBuffer{},
		err:  &testkit.LogBuffer{},
		done: make(chan struct{}),
	}
	p.cmd.Env = append(env, "EVS_ADDR="+addr)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	testkit.Eventually(t, 15*time.Second, func() error {
		select {
		case <-p.done:
			t.Fatalf("serve exited (%v) before listening:\nstdout:\n%s\nstderr:\n%s", p.cmd.ProcessState, p.out.String(), p.err.String())
		default:
		}
		if !strings.Contains(p.out.String(), "listening on "+p.base) {
			return fmt.Errorf("serve not listening:\nstdout:\n%s\nstderr:\n%s", p.out.String(), p.err.String())
		}
		return nil
	})
	return p
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func call(t *testing.T, key, method, u, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, u, err)
	}
	return resp.StatusCode, b
}

func getBatch(t *testing.T, key, base, id string) batchEnvelope {
	t.Helper()
	status, raw := call(t, key, "GET", base+"/v1/requests/"+id, "")
	var e batchEnvelope
	if status != 200 {
		t.Fatalf("poll: %d %s", status, raw)
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("poll: %v: %s", err, raw)
	}
	return e
}

// checkBatch asserts the counter invariants of contract section 3 on one
// observation, and that nothing went down since the previous one.
func checkBatch(t *testing.T, e batchEnvelope, prev *batchEnvelope, distinct int) {
	t.Helper()
	c := e.Counters
	if c.Processed != c.Deliverable+c.Undeliverable+c.Risky+c.Unknown {
		t.Fatalf("processed %d != sum of statuses: %+v", c.Processed, c)
	}
	if c.Total-c.Duplicates != distinct || c.Processed > distinct {
		t.Fatalf("counters %+v; want total - duplicates = %d and processed no more", c, distinct)
	}
	if e.Request.State == "completed" && c.Processed != distinct {
		t.Fatalf("completed with %d of %d processed", c.Processed, distinct)
	}
	if prev != nil {
		p := prev.Counters
		if c.Processed < p.Processed || c.Deliverable < p.Deliverable || c.Undeliverable < p.Undeliverable || c.Risky < p.Risky || c.Unknown < p.Unknown {
			t.Fatalf("counters went down: %+v then %+v", p, c)
		}
	}
}

// readResults pages through the results from cursor (all of them when
// cursor is empty) at the largest page size. With untilEnd it follows the
// cursor until it is null, which only a final batch gives; otherwise it
// stops at the first empty page, where a running batch has no result yet,
// and returns the cursor to come back with.
func readResults(t *testing.T, key, base, id, cursor string, untilEnd bool) ([]resultRow, string) {
	t.Helper()
	var rows []resultRow
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("more than 100 pages of results for %d addresses", len(rows))
		}
		u := base + "/v1/requests/" + id + "/results?limit=1000"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		status, raw := call(t, key, "GET", u, "")
		if status != 200 {
			t.Fatalf("results: %d %s", status, raw)
		}
		var page struct {
			Results    []resultRow `json:"results"`
			NextCursor *string     `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatalf("results: %v: %s", err, raw)
		}
		rows = append(rows, page.Results...)
		if page.NextCursor == nil {
			if !untilEnd {
				t.Fatalf("results of a running batch ended with a null cursor after %d rows", len(rows))
			}
			return rows, ""
		}
		cursor = *page.NextCursor
		if !untilEnd && len(page.Results) == 0 {
			return rows, cursor
		}
	}
}

// checkResults asserts that rows hold every distinct address exactly once,
// each with the status its SMTP answer calls for, and that the statuses add
// up to the batch's counters.
func checkResults(t *testing.T, what string, rows []resultRow, want map[string]string, e batchEnvelope) {
	t.Helper()
	seen := map[string]int{}
	byStatus := map[string]int{}
	for i, r := range rows {
		seen[r.Email]++
		byStatus[r.Status]++
		if w, ok := want[r.Email]; !ok {
			t.Errorf("%s: a result for an address not submitted (%d chars)", what, len(r.Email))
		} else if r.Status != w {
			t.Errorf("%s: row %d is %s, want %s", what, i, r.Status, w)
		}
	}
	var dupes, missing int
	for e := range want {
		switch n := seen[e]; {
		case n == 0:
			missing++
		case n > 1:
			dupes += n - 1
		}
	}
	if dupes > 0 || missing > 0 || len(rows) != len(want) {
		t.Fatalf("%s: %d rows for %d addresses: %d repeated, %d missing", what, len(rows), len(want), dupes, missing)
	}
	c := e.Counters
	got := [4]int{byStatus["deliverable"], byStatus["undeliverable"], byStatus["risky"], byStatus["unknown"]}
	if got != [4]int{c.Deliverable, c.Undeliverable, c.Risky, c.Unknown} {
		t.Fatalf("%s: statuses in the results %v differ from the counters %+v", what, byStatus, c)
	}
}
