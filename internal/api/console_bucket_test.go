package api_test

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/server"
)

// listen serves h on a free loopback port until the test ends and returns
// its origin.
func listen(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestConsoleUploadToBucketInBrowser is the AWS shape of a large list: the
// console served under a stage by the handler the requests function uses,
// whose policy also names the upload bucket's origin, and upload URLs on
// that other origin (a loopback stand-in answering CORS as the template's
// bucket rule does). The page must read its own policy, PUT the list to
// the bucket and create the batch from it, with no policy violation.
func TestConsoleUploadToBucketInBrowser(t *testing.T) {
	t.Parallel()
	var (
		evsURL atomic.Pointer[url.URL]
		stage  string
		puts   atomic.Int32
	)
	forward := func(w http.ResponseWriter, r *http.Request) {
		httputil.NewSingleHostReverseProxy(evsURL.Load()).ServeHTTP(w, r)
	}
	// The bucket: PUTs of upload objects, cross-origin, as S3 takes them.
	bucket := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", stage[:strings.Index(stage, "/Prod")])
		w.Header().Set("Access-Control-Allow-Methods", "PUT")
		w.Header().Set("Access-Control-Allow-Headers", "content-type")
		switch r.Method {
		case http.MethodOptions:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPut:
			puts.Add(1)
			forward(w, r)
		default:
			http.Error(w, "the bucket takes PUTs", http.StatusForbidden)
		}
	}))
	s := startStack(t, func(o *server.Options) { o.Config.PublicURL = bucket })
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	evsURL.Store(target)
	page, err := api.NewConsole(api.ConsoleOptions{UploadOrigin: bucket})
	if err != nil {
		t.Fatal(err)
	}
	// The stage: the console from the requests function's handler, the
	// API forwarded, nothing outside /Prod/.
	stage = listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := strings.CutPrefix(r.URL.Path, "/Prod/")
		if !ok {
			http.Error(w, "not under the stage", http.StatusForbidden)
			return
		}
		r.URL.Path, r.URL.RawPath = "/"+p, ""
		if strings.HasPrefix(r.URL.Path, "/console") {
			page.ServeHTTP(w, r)
			return
		}
		forward(w, r)
	})) + "/Prod"

	p := openPageAt(t, stage+"/console/")
	p.useKey(s.key)
	p.step("paste a long list", setField("list-paste", longList(15_000)), chromedp.Click(chromedp.ID("list-go")))
	p.waitFor("the batch to complete", `document.getElementById("batch-state").textContent === "completed"`)
	if got := p.text("batch-done"); !strings.Contains(got, "15,000 of 15,000") && !strings.Contains(got, "15000 of 15000") {
		t.Errorf("progress says %q, want all 15,000 addresses verified", got)
	}
	if n := puts.Load(); n != 1 {
		t.Errorf("%d PUTs reached the bucket, want 1", n)
	}
	for _, r := range p.log.sent(0) {
		_, u, _ := strings.Cut(r, " ")
		if !strings.HasPrefix(u, stage+"/") && !strings.HasPrefix(u, bucket+"/") {
			t.Errorf("request outside the stage and the bucket: %s", r)
		}
	}
	p.done()
}
