package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/testkit"
)

// stage is the part of API Gateway (REST API) in front of the console on
// the stack, on loopback: the routes template.yaml declares, under the
// stage's path prefix, each routed to the function the template names
// (here, only the requests function runs); a resource matches its path
// with or without a trailing slash, which stays in the event's path, and
// a greedy {proxy+} takes one segment or more. A route that keeps the
// API's authorizer answers 401 (no key is ever sent here), as does one the
// template does not name; the functions' replies are decoded as API
// Gateway decodes them (isBase64Encoded).
type stage struct {
	name   string
	routes []testkit.SAMRoute
	fn     map[string]*testkit.Runtime
}

func (s *stage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/"+s.name+"/")
	if !ok {
		http.Error(w, "no such stage", http.StatusForbidden)
		return
	}
	p = "/" + p
	route, params, found := s.match(r.Method, p)
	switch {
	case !found:
		http.Error(w, `{"message":"Missing Authentication Token"}`, http.StatusForbidden)
		return
	case route.Authorizer != "NONE" || route.APIKeyRequired != "false":
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	rt := s.fn[route.Function]
	if rt == nil {
		http.Error(w, route.Function+" does not run in this test", http.StatusBadGateway)
		return
	}
	hs := map[string]string{"Host": r.Host}
	for k, v := range r.Header {
		hs[k] = v[len(v)-1]
	}
	out, err := rt.Invoke(events.APIGatewayProxyRequest{
		Resource: route.Path, Path: p, HTTPMethod: r.Method, Headers: hs, MultiValueHeaders: r.Header, PathParameters: params,
		MultiValueQueryStringParameters: r.URL.Query(),
		RequestContext: events.APIGatewayProxyRequestContext{
			Stage: s.name, Path: r.URL.Path, ResourcePath: route.Path, HTTPMethod: r.Method, RequestID: "rid-console",
		},
	}, 20*time.Second)
	var resp events.APIGatewayProxyResponse
	if err == nil && out.Error == nil {
		err = json.Unmarshal(out.Response, &resp)
	}
	if err != nil || out.Error != nil {
		http.Error(w, "function failed", http.StatusBadGateway)
		return
	}
	b := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if b, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			http.Error(w, "bad base64 from the function", http.StatusBadGateway)
			return
		}
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
}

// match finds the template route of method and path p (without the stage):
// a resource without a greedy parameter first, as API Gateway prefers the
// most specific.
func (s *stage) match(method, p string) (testkit.SAMRoute, map[string]string, bool) {
	trimmed := p
	if len(trimmed) > 1 {
		trimmed = strings.TrimSuffix(trimmed, "/")
	}
	methodOK := func(r testkit.SAMRoute) bool { return r.Method == "ANY" || r.Method == method }
	for _, r := range s.routes {
		if strings.Contains(r.Path, "+}") || !methodOK(r) {
			continue
		}
		rp, tp := strings.Split(r.Path, "/"), strings.Split(trimmed, "/")
		if len(rp) != len(tp) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i := range rp {
			if strings.HasPrefix(rp[i], "{") && tp[i] != "" {
				params[strings.Trim(rp[i], "{}")] = tp[i]
			} else if rp[i] != tp[i] {
				ok = false
				break
			}
		}
		if ok {
			return r, params, true
		}
	}
	for _, r := range s.routes {
		prefix, greedy := strings.CutSuffix(r.Path, "{proxy+}")
		if greedy && methodOK(r) && strings.HasPrefix(p, prefix) && len(p) > len(prefix) {
			return r, map[string]string{"proxy": p[len(prefix):]}, true
		}
	}
	return testkit.SAMRoute{}, nil, false
}

// TestConsoleOnStack: the console served by the real requests binary
// behind the template's routes under a stage prefix, with no key: /Prod/console
// lands on /Prod/console/, and every embedded file comes byte for byte
// with its type and the console's headers (and 304 for its ETag); its CSP allows the origin of
// the upload URLs the same function hands out, and the API next to it
// still wants a key.
func TestConsoleOnStack(t *testing.T) {
	w := newAWSWorld(t)
	base, requests := serveRequestsStage(t, w)

	// The upload URL the function makes for an account, for the origin
	// the page's CSP must allow.
	_, acct := w.seedKey(t, true)
	out, err := requests.Invoke(proxyEvent("POST", "/v1/uploads", "/v1/uploads", nil, acct, `{"contentType":"text/csv"}`), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var created events.APIGatewayProxyResponse
	var up struct{ URL string }
	if err := json.Unmarshal(out.Response, &created); err != nil || created.StatusCode != http.StatusCreated || json.Unmarshal([]byte(created.Body), &up) != nil {
		t.Fatalf("POST /v1/uploads: %s %s", out.Response, out.Error)
	}
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	wantCSP := api.ConsoleCSP + "; connect-src 'self' " + u.Scheme + "://" + u.Host

	// get GETs path under the stage, with If-None-Match: inm if given.
	get := func(path string, inm ...string) (*http.Response, []byte) {
		t.Helper()
		h := http.Header{}
		for _, tag := range inm {
			h.Set("If-None-Match", tag)
		}
		return testkit.Get(t, base+path, h)
	}
	check := func(what string, res *http.Response) {
		t.Helper()
		h := res.Header
		for k, want := range map[string]string{"Content-Security-Policy": wantCSP, "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"} {
			if got := h.Get(k); got != want {
				t.Errorf("%s: %s %q, want %q", what, k, got, want)
			}
		}
	}

	// The address a person types: redirected, relative to the stage.
	res, page := get("/console")
	if res.Request.URL.Path != "/Prod/console/" || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /Prod/console ended at %s with %d, want /Prod/console/ and 200", res.Request.URL.Path, res.StatusCode)
	}
	index, err := fs.ReadFile(api.ConsoleFiles(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(page, index) || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("/Prod/console/: %q, %d bytes; want the embedded index.html's %d", res.Header.Get("Content-Type"), len(page), len(index))
	}
	check("/Prod/console/", res)

	types := map[string]string{".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
	n := 0
	err = fs.WalkDir(api.ConsoleFiles(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "index.html" { // index.html: its directory, above
			return err
		}
		n++
		want, err := fs.ReadFile(api.ConsoleFiles(), p)
		if err != nil {
			return err
		}
		res, got := get(api.ConsolePath + p)
		ct := res.Header.Get("Content-Type")
		if res.StatusCode != http.StatusOK || !bytes.Equal(got, want) || types[p[strings.LastIndex(p, "."):]] == "" || !strings.HasPrefix(ct, types[p[strings.LastIndex(p, "."):]]) {
			t.Errorf("%s: %d %q, %d bytes; want 200, its type and the embedded %d bytes", p, res.StatusCode, ct, len(got), len(want))
		}
		check(p, res)
		// Unchanged since: 304, nothing carried.
		if res, got := get(api.ConsolePath+p, res.Header.Get("ETag")); res.StatusCode != http.StatusNotModified || len(got) != 0 {
			t.Errorf("%s with its ETag: %d, %d bytes; want 304 and none", p, res.StatusCode, len(got))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%d files besides index.html", n)
	}
	if res, _ := get("/console/nothing.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("a missing file: %d, want 404", res.StatusCode)
	}
	// The API beside it is not opened by the console's routes.
	for _, p := range []string{"/v1/requests/x", "/v1/uploads"} {
		if res, _ := get(p); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a key: %d, want 401", p, res.StatusCode)
		}
	}
}

// serveRequestsStage serves the real requests binary of w behind the
// template's routes on loopback, under the stage prefix /Prod, and returns
// that base URL and the function's runtime.
func serveRequestsStage(t *testing.T, w *awsWorld) (string, *testkit.Runtime) {
	t.Helper()
	tpl, err := testkit.LoadSAMTemplate("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	requests := w.start(t, build(t, "requests"))
	st := &stage{name: "Prod", routes: tpl.Routes, fn: map[string]*testkit.Runtime{"RequestsFunction": requests}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: st, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/Prod", requests
}
