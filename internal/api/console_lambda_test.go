package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/lambda"
)

// event is the proxy event API Gateway (REST API) hands the function for
// GET {stage}{path} matched to resource, without any authorizer context.
func event(resource, path string, params map[string]string) events.APIGatewayProxyRequest {
	return events.APIGatewayProxyRequest{
		Resource: resource, Path: path, HTTPMethod: http.MethodGet, PathParameters: params,
		Headers: map[string]string{"Accept": "*/*", "Host": "abc123.execute-api.us-east-1.amazonaws.com"},
		RequestContext: events.APIGatewayProxyRequestContext{
			Stage: "Prod", Path: "/Prod" + path, ResourcePath: resource, HTTPMethod: http.MethodGet, RequestID: "rid-1",
			Identity: events.APIGatewayRequestIdentity{SourceIP: "203.0.113.9"},
		},
	}
}

var discard = slog.New(slog.NewJSONHandler(io.Discard, nil))

// lambdaOf serves the console h as the requests function does: mounted
// beside next (nil: no route), behind api.Observe and the API Gateway
// adapter.
func lambdaOf(h, next http.Handler, logger *slog.Logger) lambda.ProxyHandler {
	mux := http.NewServeMux()
	api.MountConsole(mux, h)
	if next == nil {
		next = http.HandlerFunc(api.NotFound)
	}
	mux.Handle("/", next)
	return lambda.Proxy(api.Observe(api.ObserveOptions{Logger: logger}, mux))
}

// body is a proxy response's body as API Gateway sends it on.
func body(t *testing.T, r events.APIGatewayProxyResponse) []byte {
	t.Helper()
	if !r.IsBase64Encoded {
		return []byte(r.Body)
	}
	b, err := base64.StdEncoding.DecodeString(r.Body)
	if err != nil {
		t.Fatalf("isBase64Encoded, but the body is not base64: %v", err)
	}
	return b
}

// TestLambdaServesConsole: the console's proxy events get the embedded
// files with the headers of `evs serve`, the CSP allowing the upload
// origin besides the page's own; every other event goes to the API.
func TestLambdaServesConsole(t *testing.T) {
	const origin = "https://evs-inputs.s3.us-east-1.amazonaws.com"
	h, err := api.NewConsole(api.ConsoleOptions{UploadOrigin: origin})
	if err != nil {
		t.Fatal(err)
	}
	var passed []string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed = append(passed, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	var logs bytes.Buffer
	fn := lambdaOf(h, next, slog.New(slog.NewJSONHandler(&logs, nil)))
	index, err := fs.ReadFile(api.ConsoleFiles(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	css, err := fs.ReadFile(api.ConsoleFiles(), "console.css")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		ev       events.APIGatewayProxyRequest
		status   int
		location string
		body     []byte
		ctype    string
	}{
		{"the redirect", event(api.ConsoleRootResource, "/console", nil), http.StatusMovedPermanently, "console/", nil, ""},
		{"the page", event(api.ConsoleRootResource, "/console/", nil), http.StatusOK, "", index, "text/html"},
		{"a file", event(api.ConsoleFilesResource, "/console/console.css", map[string]string{"proxy": "console.css"}), http.StatusOK, "", css, "text/css"},
		// Behind a custom domain's base path mapping the event's path has
		// the base path too: the file comes from the path parameter.
		{"under a base path", event(api.ConsoleFilesResource, "/evs/console/console.css", map[string]string{"proxy": "console.css"}), http.StatusOK, "", css, "text/css"},
		{"index.html", event(api.ConsoleFilesResource, "/console/index.html", map[string]string{"proxy": "index.html"}), http.StatusMovedPermanently, "./", nil, ""},
		{"a missing file", event(api.ConsoleFilesResource, "/console/nothing.js", map[string]string{"proxy": "nothing.js"}), http.StatusNotFound, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := fn(context.Background(), tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || resp.Headers["Location"] != tc.location {
				t.Errorf("%d Location %q, want %d %q", resp.StatusCode, resp.Headers["Location"], tc.status, tc.location)
			}
			if tc.body != nil && !bytes.Equal(body(t, resp), tc.body) {
				t.Errorf("body of %d bytes differs from the embedded file's %d", len(body(t, resp)), len(tc.body))
			}
			if !strings.HasPrefix(resp.Headers["Content-Type"], tc.ctype) {
				t.Errorf("Content-Type %q, want %q", resp.Headers["Content-Type"], tc.ctype)
			}
			h := http.Header{}
			for k, v := range resp.Headers {
				h.Set(k, v)
			}
			checkHeaders(t, tc.name, h)
			if got, want := h.Get("Content-Security-Policy"), api.ConsoleCSP+"; connect-src 'self' "+origin; got != want {
				t.Errorf("CSP %q, want %q", got, want)
			}
			if h.Get("Content-Length") != "" {
				t.Errorf("Content-Length %q: API Gateway sets its own", h.Get("Content-Length"))
			}
		})
	}
	if len(passed) != 0 {
		t.Errorf("console events reached the API: %v", passed)
	}
	// One line per console call, as `evs serve` writes it: route
	// /console/, no account.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d log lines for 6 console calls:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		var c struct {
			Msg, RequestID, Method, Route, AccountID, Client string
			Status                                           int
		}
		if err := json.Unmarshal([]byte(l), &c); err != nil || c.Msg != "call" || c.RequestID != "rid-1" || c.Method != "GET" ||
			c.Route != api.ConsolePath || c.AccountID != "" || c.Client != "203.0.113.9" || c.Status == 0 {
			t.Errorf("log line %s (%v)", l, err)
		}
	}
	logs.Reset()
	for _, res := range []string{"/v1/requests", "/v1/requests/{id}", "/v1/uploads"} {
		if resp, err := fn(context.Background(), event(res, strings.ReplaceAll(res, "{id}", "x"), nil)); err != nil || resp.StatusCode != http.StatusTeapot {
			t.Errorf("%s: %d %v, want the API's answer", res, resp.StatusCode, err)
		}
	}
	if len(passed) != 3 || strings.Contains(logs.String(), `"route":"`+api.ConsolePath+`"`) {
		t.Errorf("the API saw %v, want its three events, and the console claimed them: %q", passed, logs.String())
	}
}

// TestLambdaBinaryBody: a reply that is not UTF-8 text goes base64-encoded
// (API Gateway decodes it: every type is binary in the template), text as
// is; the handler's status and headers pass unchanged.
func TestLambdaBinaryBody(t *testing.T) {
	for _, b := range [][]byte{{0x89, 'P', 'N', 'G', 0xff, 0x00}, []byte("body { color: #000 }\n")} {
		fn := lambdaOf(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			w.Header().Add("Vary", "A")
			w.Header().Add("Vary", "B")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(b)
		}), nil, discard)
		resp, err := fn(context.Background(), event(api.ConsoleFilesResource, "/console/x", map[string]string{"proxy": "x"}))
		if err != nil {
			t.Fatal(err)
		}
		binary := !strings.HasPrefix(string(b), "body")
		if resp.IsBase64Encoded != binary || !bytes.Equal(body(t, resp), b) {
			t.Errorf("%q: isBase64Encoded %v, body %q", b, resp.IsBase64Encoded, resp.Body)
		}
		if resp.StatusCode != http.StatusAccepted || resp.Headers["Content-Type"] != "image/png" || strings.Join(resp.MultiValueHeaders["Vary"], ",") != "A,B" {
			t.Errorf("%d %v %v", resp.StatusCode, resp.Headers, resp.MultiValueHeaders)
		}
	}
}

// TestUploadOriginChecked: an upload origin must be one a CSP can name;
// evs serve's handler allows its own origin only.
func TestUploadOriginChecked(t *testing.T) {
	for _, bad := range []string{"bucket.s3.amazonaws.com", "ftp://h", "https://h/path", "https://h; script-src *", "https://*.amazonaws.com", "https://u@h", "https://h?x"} {
		if _, err := api.NewConsole(api.ConsoleOptions{UploadOrigin: bad}); err == nil {
			t.Errorf("origin %q accepted", bad)
		}
	}
	for in, want := range map[string]string{"https://B.s3.amazonaws.com": "https://b.s3.amazonaws.com", "http://127.0.0.1:4566/": "http://127.0.0.1:4566"} {
		h, err := api.NewConsole(api.ConsoleOptions{UploadOrigin: in})
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		resp, _ := lambdaOf(h, nil, discard)(context.Background(), event(api.ConsoleRootResource, "/console/", nil))
		if got := resp.Headers["Content-Security-Policy"]; !strings.HasSuffix(got, "; connect-src 'self' "+want) {
			t.Errorf("%q: CSP %q, want connect-src 'self' %s", in, got, want)
		}
	}
	resp, _ := lambdaOf(api.ConsoleHandler(), nil, discard)(context.Background(), event(api.ConsoleRootResource, "/console/", nil))
	if got := resp.Headers["Content-Security-Policy"]; got != api.ConsoleCSP || strings.Contains(got, "connect-src") {
		t.Errorf("evs serve's CSP %q, want %q", got, api.ConsoleCSP)
	}
}
