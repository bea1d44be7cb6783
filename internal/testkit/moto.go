// Package testkit holds the real peers and helpers that several packages'
// tests and benchmarks share. They are a moto_server (DynamoDB, SQS and
// Secrets Manager APIs) on loopback with AWS clients for it, a loopback AWS
// Lambda Runtime API to drive the real function binaries, loopback DNS,
// SMTP, SOCKS5 and Postfix peers, a settable clock, the bare net/http floor
// the HTTP path is measured against, a goroutine-safe log buffer, and a reader of
// template.yaml to check the code against the deployment. Only tests and
// the load harness (infra/loadtest) import it.
//
// Why peers of our own, and which are not: where a real server's behaviour
// is the subject, the tests run the real one (moto_server for the AWS APIs,
// Postfix and postgrey as MTAs, dante as the SOCKS5 exit; DNS answers are
// served with miekg/dns). The scripted SMTP server and the Lambda Runtime
// API are ours because no maintained library offers them: a test needs an
// SMTP server that answers a chosen reply at a chosen stage, stalls or
// drops the connection, and the Lambda service's runtime endpoint is not
// shipped as a library or a Debian package. Neither runs outside tests.
//
// Moto: the servers are those named by EVS_MOTO_ENDPOINT (URLs,
// comma-separated) when it is set (the Makefile's infra/scripts/with-moto.sh
// exports three); otherwise the first test that asks starts `moto_server` on
// a free loopback port. Each top-level test and its subtests use one server,
// the tests of a binary taking turns over them, so that tests that run in
// parallel do not all queue on one. Tests share servers, so they name their
// tables and queues with UniqueName.
package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// MotoEnvEndpoint names the environment variable holding the URL of a running
// moto_server.
const MotoEnvEndpoint = "EVS_MOTO_ENDPOINT"

// startTimeout bounds how long a starting moto_server may take to answer;
// the Python interpreter's start alone takes a second or two.
const startTimeout = 60 * time.Second

var (
	once     sync.Once
	servers  *spread
	startErr error
	server   *exec.Cmd
)

// MotoEndpoint returns the URL of the moto server of t's top-level test,
// starting one on first use when EVS_MOTO_ENDPOINT is not set. A test that
// needs moto fails, never skips, when no server can be had.
func MotoEndpoint(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if e := os.Getenv(MotoEnvEndpoint); e != "" {
			servers = &spread{urls: strings.Split(e, ",")}
			// Each test binary starts at another server, so that the
			// packages go test runs at once do not all begin on the first.
			servers.given.Store(uint64(os.Getpid()))
			return
		}
		var e string
		e, startErr = start()
		servers = &spread{urls: []string{e}}
	})
	if startErr != nil {
		t.Fatalf("testkit: moto: %v", startErr)
	}
	return servers.of(t.Name())
}

// spread gives each top-level test one of urls, in turn, and its subtests
// the same.
type spread struct {
	urls  []string
	given atomic.Uint64
	tests sync.Map // top-level test name → URL
}

func (s *spread) of(test string) string {
	top, _, _ := strings.Cut(test, "/")
	if u, ok := s.tests.Load(top); ok {
		return u.(string)
	}
	u := strings.TrimRight(strings.TrimSpace(s.urls[(s.given.Add(1)-1)%uint64(len(s.urls))]), "/")
	u2, _ := s.tests.LoadOrStore(top, u)
	return u2.(string)
}

// start runs moto_server on a free loopback port and waits until it answers.
func start() (string, error) {
	path, err := exec.LookPath("moto_server")
	if err != nil {
		return "", fmt.Errorf("moto_server not found (install it with: pip install 'moto[server]'), or set %s", MotoEnvEndpoint)
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(path, "-H", "127.0.0.1", "-p", port)
	cmd.SysProcAttr = sysProcAttr()
	var out tail
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start moto_server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	url := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			return "", fmt.Errorf("moto_server exited at start (%v): %s", err, out.String())
		default:
		}
		resp, err := client.Get(url + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				server = cmd
				return url, nil
			}
		}
		if time.Now().After(deadline) {
			kill(cmd)
			return "", fmt.Errorf("moto_server did not answer on %s within %v: %s", url, startTimeout, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// MotoMain runs the tests of m and then stops a moto_server that MotoEndpoint
// started. Call it from TestMain: os.Exit(testkit.MotoMain(m)).
func MotoMain(m *testing.M) int {
	code := m.Run()
	StopMoto()
	return code
}

// StopMoto stops the moto_server that MotoEndpoint started, if any.
func StopMoto() {
	if server != nil {
		kill(server)
	}
}

// tail keeps the last few KiB of the server's output for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if n := len(w.buf); n > 4096 {
		w.buf = w.buf[n-4096:]
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.buf))
}

// AWSConfig returns an AWS configuration for the shared moto server: region
// us-east-1, dummy static credentials (moto accepts any) and few retries,
// so a broken test fails fast instead of backing off.
func AWSConfig(t testing.TB) aws.Config {
	t.Helper()
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("testing", "testing", ""),
		BaseEndpoint: aws.String(MotoEndpoint(t)),
		// Five attempts: moto, several servers at once on two loaded
		// cores, now and then cuts a reply short (a body that cannot be
		// read), which the SDK retries as AWS's own transient faults.
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 5 })
		},
	}
}

// DynamoDB returns a DynamoDB client of the shared moto server. opts adjust
// the client, for instance to add fault-injecting middleware.
func DynamoDB(t testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(AWSConfig(t), opts...)
}

// S3 returns an S3 client of the shared moto server, path-style (moto has
// no per-bucket host names).
func S3(t testing.TB, opts ...func(*s3.Options)) *s3.Client {
	t.Helper()
	return s3.NewFromConfig(AWSConfig(t), append([]func(*s3.Options){func(o *s3.Options) { o.UsePathStyle = true }}, opts...)...)
}

// Bucket creates a bucket of its own for the test on the shared moto
// server and deletes it, with its objects, when the test ends.
func Bucket(t testing.TB, c *s3.Client) string {
	t.Helper()
	name := strings.ToLower(invalid.ReplaceAllString(UniqueName(t, "in"), "-"))
	name = strings.ReplaceAll(name, "_", "-")
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	name = strings.Trim(name, "-")
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				break
			}
			for _, o := range page.Contents {
				_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: o.Key})
			}
		}
		_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
	})
	return name
}

// SQS returns an SQS client of the shared moto server.
func SQS(t testing.TB, opts ...func(*sqs.Options)) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(AWSConfig(t), opts...)
}

// SecretsManager returns a Secrets Manager client of the shared moto server.
func SecretsManager(t testing.TB) *secretsmanager.Client {
	t.Helper()
	return secretsmanager.NewFromConfig(AWSConfig(t))
}

var (
	seq     atomic.Uint64
	invalid = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
)

// UniqueName returns a resource name unique within the test binary and across
// binaries sharing one server: base, a form of the test's name, the process
// ID and a counter. It stays within the 80 characters SQS allows for queue
// names (DynamoDB allows 255).
func UniqueName(t testing.TB, base string) string {
	t.Helper()
	suffix := fmt.Sprintf("-%d-%d", os.Getpid(), seq.Add(1))
	name := base + "-" + invalid.ReplaceAllString(t.Name(), "_")
	if max := 80 - len(suffix); len(name) > max {
		name = name[:max]
	}
	return name + suffix
}
