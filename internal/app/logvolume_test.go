package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// maxLogBytesPerAddress bounds what the functions write to CloudWatch Logs
// for one address of a full-mode batch (docs/aws.md, "Cost of 1,000,000
// addresses"): log lines and EMF metrics, priced per GB ingested.
const maxLogBytesPerAddress = 1500

// TestWorkerLogVolume counts the bytes the Lambda functions write to
// stdout (which Lambda sends to CloudWatch Logs: JSON log lines and EMF
// metrics) while a full-mode batch of the cost section's mix runs on AWS
// (moto): 40 % at one domain, 60 % on domains of 3, 300 addresses (a
// larger list only sums more per line: 1,000 gave 91 bytes an address,
// 300 give 98). The figure per address is logged for the docs; the bound
// keeps a chatty change from going unnoticed.
//
// Not parallel: it counts the process's stdout, which no other test may
// write to meanwhile.
func TestWorkerLogVolume(t *testing.T) {
	const big, small = 120, 60 // 120 at big.example, 60 domains of 3
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	var (
		mu    sync.Mutex
		bytes int
		kinds = map[string]int{}
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var m struct {
				Msg string `json:"msg"`
				AWS *struct {
					CloudWatchMetrics []struct {
						Metrics []struct{ Name string }
					}
				} `json:"_aws"`
			}
			_ = json.Unmarshal(line, &m)
			kind := "log: " + m.Msg
			if m.AWS != nil && len(m.AWS.CloudWatchMetrics) > 0 && len(m.AWS.CloudWatchMetrics[0].Metrics) > 0 {
				kind = "EMF " + m.AWS.CloudWatchMetrics[0].Metrics[0].Name
			}
			mu.Lock()
			bytes += len(line) + 1
			kinds[kind] += len(line) + 1
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		os.Stdout = stdout
		w.Close()
		<-read
	})

	p := startPeers(t, suiteRcpt)
	var emails []string
	for i := range big {
		emails = append(emails, fmt.Sprintf("ok%d@big.example", i))
	}
	p.dns.AddRecord("big.example. 300 IN MX 10 mx1.good.example.")
	for d := range small {
		p.dns.AddRecord(fmt.Sprintf("s%d.example. 300 IN MX 10 mx1.good.example.", d))
		for i := range 3 {
			emails = append(emails, fmt.Sprintf("ok%d@s%d.example", i, d))
		}
	}
	env := suiteEnv(p)
	env["EVS_CACHE_TTL"] = "0"
	env["EVS_PROVIDER_SESSIONS"] = "64" // every domain's MX host is the one peer
	d := startAWS(t, env, time.Now).(*awsDeployment)
	s := &suite{deployment: d, peers: p, name: "aws"}
	acct, key := s.account(t, false)
	list, _ := json.Marshal(emails)
	id, _ := s.create(t, key, `{"emails":`+string(list)+`,"mode":"full"}`)
	testkit.EventuallyEvery(t, 5*time.Minute, 500*time.Millisecond, func() error {
		b, err := d.st.Batch(context.Background(), acct, id)
		if err == nil && b.State == "completed" {
			return nil
		}
		return fmt.Errorf("batch %s %+v %v", b.State, b.Counters, err)
	})
	mu.Lock()
	defer mu.Unlock()
	per := float64(bytes) / float64(len(emails))
	var parts []string
	for k, v := range kinds {
		if v*50 >= bytes {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, float64(v)/float64(len(emails))))
		}
	}
	t.Logf("%d addresses: %d bytes to stdout, %.0f per address (%s)", len(emails), bytes, per, strings.Join(parts, ", "))
	if per > maxLogBytesPerAddress {
		t.Fatalf("%.0f bytes of logs and metrics per address, over %d", per, maxLogBytesPerAddress)
	}
}
