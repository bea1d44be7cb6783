package testkit

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

func TestMain(m *testing.M) { os.Exit(MotoMain(m)) }

// TestClientsReachMoto checks that the configured clients talk to the
// loopback server: an SQS queue created through one is listed through it.
func TestClientsReachMoto(t *testing.T) {
	ep := MotoEndpoint(t)
	if !strings.HasPrefix(ep, "http://127.") && !strings.HasPrefix(ep, "http://localhost") {
		t.Errorf("Endpoint = %q, want a loopback URL", ep)
	}
	ctx := context.Background()
	q := SQS(t)
	name := UniqueName(t, "q")
	if _, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	out, err := q.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(name)})
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	if len(out.QueueUrls) != 1 || !strings.HasSuffix(out.QueueUrls[0], "/"+name) {
		t.Errorf("ListQueues = %v, want the one queue %s", out.QueueUrls, name)
	}
	if _, err := DynamoDB(t).ListTables(ctx, nil); err != nil {
		t.Fatalf("DynamoDB ListTables: %v", err)
	}
}

// TestSpreadByTopLevelTest: with several servers, each top-level test gets
// the next one, and its subtests the same as it.
func TestSpreadByTopLevelTest(t *testing.T) {
	s := &spread{urls: []string{"http://127.0.0.1:1/", " http://127.0.0.1:2"}}
	got := []string{s.of("TestA"), s.of("TestB/sub"), s.of("TestA/sub/deeper"), s.of("TestC"), s.of("TestB")}
	want := []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:1", "http://127.0.0.1:1", "http://127.0.0.1:2"}
	if !slices.Equal(got, want) {
		t.Errorf("servers given %v, want %v", got, want)
	}
}

func TestNameUniqueAndShort(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := UniqueName(t, "evs-table")
		if seen[n] {
			t.Fatalf("Name returned %q twice", n)
		}
		seen[n] = true
	}
	t.Run(strings.Repeat("very long subtest name/", 10), func(t *testing.T) {
		n := UniqueName(t, "evs-queue")
		if len(n) > 80 {
			t.Errorf("Name = %q, %d characters, want at most 80", n, len(n))
		}
		for _, r := range n {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				t.Fatalf("Name = %q has %q, not allowed in queue names", n, r)
			}
		}
	})
}

// TestMissingServerFails checks that without moto_server and without
// EVS_MOTO_ENDPOINT a test fails with the reason instead of skipping: it
// reruns itself with an empty PATH.
func TestMissingServerFails(t *testing.T) {
	if os.Getenv("MOTOTEST_CHILD") == "1" {
		MotoEndpoint(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingServerFails$", "-test.v")
	cmd.Env = []string{"MOTOTEST_CHILD=1", "PATH=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child without moto_server passed:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "moto_server not found") {
		t.Errorf("child output does not name the missing moto_server:\n%s", out)
	}
	if strings.Contains(string(out), "SKIP") {
		t.Errorf("child skipped:\n%s", out)
	}
}
