package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestMetricsAfterRealCalls runs `evs serve` with EVS_METRICS_ADDR, makes
// real calls (verifications through loopback DNS and SMTP, errors, a batch
// with a webhook) and checks that /metrics moved accordingly, with no
// address, domain, key or batch id in any label.
func TestMetricsAfterRealCalls(t *testing.T) {
	bin := buildEVS(t)
	dns := testkit.StartDNS(t)
	dns.AddRecord("good.example. 300 IN MX 10 mx.good.example.")
	dns.AddRecord("mx.good.example. 300 IN A 127.0.0.1")
	smtp := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.1", Rcpt: func(addr string) string {
		if strings.HasPrefix(strings.ToLower(addr), "alice@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 user unknown"
	}})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer hook.Close()

	dir := t.TempDir()
	key := createLiveKey(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	p := startServe(t, bin, liveEnv(dir, dns.Addr, smtp.Port, "EVS_METRICS_ADDR="+maddr))

	for _, e := range []string{"alice@good.example", "bob@good.example"} {
		if s, b := call(t, key, "POST", p.base+"/v1/verify", `{"email":"`+e+`"}`); s != 200 {
			t.Fatalf("verify %s: %d %s", e, s, b)
		}
	}
	const missing = "0b7e9d2c-1111-4222-8333-944455556666"
	if s, _ := call(t, key, "GET", p.base+"/v1/requests/"+missing, ""); s != 404 {
		t.Fatalf("missing batch: %d", s)
	}
	if s, _ := call(t, "evs.bogus", "POST", p.base+"/v1/verify", `{"email":"x@good.example"}`); s != 401 {
		t.Fatalf("bad key: %d", s)
	}
	s, b := call(t, key, "POST", p.base+"/v1/requests", `{"emails":["alice@good.example","carol@good.example"],"mode":"full","callbackUrl":"`+hook.URL+`"}`)
	if s != 201 {
		t.Fatalf("create batch: %d %s", s, b)
	}

	var m map[string]float64
	testkit.EventuallyEvery(t, 30*time.Second, 100*time.Millisecond, func() error {
		if m = scrape(t, "http://"+maddr+"/metrics"); m[`evs_webhook_deliveries_total{result="delivered"}`] >= 1 {
			return nil
		}
		return fmt.Errorf("no delivered webhook counted; metrics:\n%v\nserve stderr:\n%s", m, p.err.String())
	})
	for series, min := range map[string]float64{
		`evs_http_requests_total{code="200",route="/v1/verify"}`:        2,
		`evs_http_requests_total{code="404",route="/v1/requests/{id}"}`: 1,
		`evs_http_requests_total{code="401",route="/v1/verify"}`:        1,
		`evs_http_requests_total{code="201",route="/v1/requests"}`:      1,
		`evs_http_request_duration_seconds_count{route="/v1/verify"}`:   3,
		// alice's second verdict, in the batch, comes from the cache.
		`evs_verifications_total{mode="full",reason="accepted_email",status="deliverable"}`: 1,
		`evs_cache_requests_total{result="hit"}`:                                            1,
		`evs_cache_requests_total{result="miss"}`:                                           3,
		// alice's accept-all probe, in /v1/verify: the domain was not known.
		`evs_domain_facts_total{result="miss"}`:                                               1,
		`evs_verifications_total{mode="full",reason="rejected_email",status="undeliverable"}`: 2,
		`evs_smtp_replies_total{class="2xx"}`:                                                 1,
		`evs_smtp_replies_total{class="5xx"}`:                                                 2,
		`evs_dns_lookup_duration_seconds_count`:                                               1,
		`evs_batch_addresses_pending`:                                                         0,
		`go_goroutines`:                                                                       1,
		`process_cpu_seconds_total`:                                                           0,
	} {
		got, ok := m[series]
		if !ok || got < min {
			t.Errorf("%s = %v (present %v), want >= %v", series, got, ok, min)
		}
	}
	for series := range m {
		for _, bad := range []string{"@", "good.example", key[4:], missing, "bogus"} {
			if strings.Contains(series, bad) {
				t.Errorf("series %s holds %q", series, bad)
			}
		}
	}
}

// scrape reads a text exposition into series → value.
func scrape(t *testing.T, u string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}
