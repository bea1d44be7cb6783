package lambda

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/evs"
)

// ProxyHandler is an API Gateway proxy Lambda handler.
type ProxyHandler func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)

// Proxy serves h to API Gateway's proxy events. The reply is buffered, as a
// Lambda response is one value.
func Proxy(h http.Handler) ProxyHandler {
	return func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		r, err := Request(ctx, ev)
		if err != nil {
			// Only a method that is no HTTP token gets here.
			return events.APIGatewayProxyResponse{StatusCode: http.StatusMethodNotAllowed}, nil
		}
		w := &recorder{header: http.Header{}}
		h.ServeHTTP(w, r)
		return w.response(), nil
	}
}

// Request is the *http.Request of a proxy event, its context carrying the
// event's request id and the authorizer's principal, if any. A body that is
// not valid base64 fails the handler's read like any unreadable body.
func Request(ctx context.Context, ev events.APIGatewayProxyRequest) (*http.Request, error) {
	var body io.Reader = strings.NewReader(ev.Body)
	length := int64(len(ev.Body))
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			body, length = errReader{evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid base64.")}, -1
		} else {
			body, length = bytes.NewReader(b), int64(len(b))
		}
	}
	ctx = evs.NewContextWithRequestID(ctx, ev.RequestContext.RequestID)
	if p, ok := principal(ev.RequestContext.Authorizer); ok {
		ctx = evs.NewContextWithPrincipal(ctx, p)
	}
	r, err := http.NewRequestWithContext(ctx, ev.HTTPMethod, "/", body)
	if err != nil {
		return nil, err
	}
	p := resourcePath(ev)
	r.URL = &url.URL{Path: p, RawQuery: query(ev).Encode()}
	r.RequestURI = r.URL.RequestURI()
	for k, vs := range ev.MultiValueHeaders {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	for k, v := range ev.Headers {
		if _, ok := r.Header[http.CanonicalHeaderKey(k)]; !ok {
			r.Header.Set(k, v)
		}
	}
	r.Host = r.Header.Get("Host")
	r.Header.Del("Host")
	r.ContentLength = length
	if ip := ev.RequestContext.Identity.SourceIP; ip != "" {
		r.RemoteAddr = net.JoinHostPort(ip, "0")
	}
	return r, nil
}

// resourcePath is the path the resource matched, rebuilt from its template
// and path parameters: behind a custom domain the event's own path also
// holds the base path mapping. A REST API matches "/console/" to the
// resource "/console": the trailing slash is kept.
func resourcePath(ev events.APIGatewayProxyRequest) string {
	if ev.Resource == "" {
		return ev.Path
	}
	var b strings.Builder
	for _, seg := range strings.Split(ev.Resource[1:], "/") {
		b.WriteByte('/')
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			b.WriteString(ev.PathParameters[strings.TrimSuffix(seg[1:len(seg)-1], "+")])
			continue
		}
		b.WriteString(seg)
	}
	p := b.String()
	if strings.HasSuffix(ev.Path, "/") && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

func query(ev events.APIGatewayProxyRequest) url.Values {
	q := url.Values{}
	for k, vs := range ev.MultiValueQueryStringParameters {
		q[k] = append(q[k], vs...)
	}
	for k, v := range ev.QueryStringParameters {
		if _, ok := q[k]; !ok {
			q.Set(k, v)
		}
	}
	return q
}

// principal reads the context our REQUEST authorizer answered with, as API
// Gateway hands it to the integration: every value a string.
func principal(a map[string]any) (evs.Principal, bool) {
	id, _ := a[contextAccountID].(string)
	if id == "" {
		return evs.Principal{}, false
	}
	keyID, _ := a[contextKeyID].(string)
	test := false
	switch v := a[contextTestMode].(type) {
	case string:
		test = v == "true"
	case bool:
		test = v
	}
	p := evs.Principal{AccountID: id, KeyID: keyID, Test: test}
	if kind, _ := a[contextKeyKind].(string); kind != "" {
		// Any kind but secret is read as publishable: an unknown word
		// must never widen what a key may do.
		p.Kind = evs.KeyPublishable
		origins, _ := a[contextOrigins].(string)
		p.Origins = strings.Fields(origins)
		limits, _ := a[contextLimits].(string)
		_, _ = fmt.Sscanf(limits, "%d %d", &p.Limits.PerAddress, &p.Limits.PerKey) // none: the defaults
	}
	return p, true
}

// recorder is the http.ResponseWriter of one proxy response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) { w.status = cmp.Or(w.status, code) }

func (w *recorder) Write(b []byte) (int, error) {
	w.status = cmp.Or(w.status, http.StatusOK)
	return w.body.Write(b)
}

// response is the proxy response of what was written: the body as text when
// it is UTF-8, else base64, which API Gateway decodes since the API declares
// every type binary (BinaryMediaTypes */*).
func (w *recorder) response() events.APIGatewayProxyResponse {
	w.status = cmp.Or(w.status, http.StatusOK)
	// API Gateway sets the length of what it sends.
	w.header.Del("Content-Length")
	resp := events.APIGatewayProxyResponse{StatusCode: w.status, Headers: make(map[string]string, len(w.header))}
	for k, vs := range w.header {
		if len(vs) == 1 {
			resp.Headers[k] = vs[0]
			continue
		}
		if resp.MultiValueHeaders == nil {
			resp.MultiValueHeaders = map[string][]string{}
		}
		resp.MultiValueHeaders[k] = vs
	}
	if b := w.body.Bytes(); utf8.Valid(b) {
		resp.Body = string(b)
	} else {
		resp.Body = base64.StdEncoding.EncodeToString(b)
		resp.IsBase64Encoded = true
	}
	return resp
}

// errReader is a body whose every read fails with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
