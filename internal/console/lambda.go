package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
)

// The API Gateway resources of the console on the AWS stack (template.yaml,
// on the requests function, with no authorizer). A REST API matches
// /console/ to RootResource too (a trailing slash names no other
// resource), keeping the slash in the event's path: that one resource
// both redirects /console and serves the page at /console/.
const (
	RootResource  = "/console"
	FilesResource = "/console/{proxy+}"
)

// ProxyHandler is an API Gateway (REST API) Lambda proxy handler (an
// alias, so metrics.ProxyHandler and the API's handlers fit as they are).
type ProxyHandler = func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)

// Lambda serves h, a console handler (New), to the proxy events of the
// console's resources and hands every other event to next: the console
// rides on a function of the API, with the same files and headers as on
// `evs serve`. Each console call gets the API's one log line on logger
// (route Path, as on `evs serve`; no account, since no key is asked).
func Lambda(h http.Handler, next ProxyHandler, logger *slog.Logger) ProxyHandler {
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		start := time.Now()
		var p string
		switch req.Resource {
		case RootResource:
			p = RootResource
			if strings.HasSuffix(req.Path, "/") {
				p = Path
			}
		case FilesResource:
			// From the path parameter, not the event's path: behind a
			// custom domain that path also holds the base path mapping.
			p = Path + req.PathParameters["proxy"]
		default:
			return next(ctx, req)
		}
		resp := serveEvent(ctx, h, req, p)
		client, _ := netip.ParseAddr(req.RequestContext.Identity.SourceIP)
		c := api.Call{RequestID: req.RequestContext.RequestID, Method: req.HTTPMethod, Route: Path, ClientAddr: client,
			Status: resp.StatusCode, Start: start}
		c.Log(ctx, logger, time.Now())
		return resp, nil
	}
}

// serveEvent runs h on the request of req for the console path p and turns
// its reply into a proxy response.
func serveEvent(ctx context.Context, h http.Handler, req events.APIGatewayProxyRequest, p string) events.APIGatewayProxyResponse {
	r, err := http.NewRequestWithContext(ctx, req.HTTPMethod, "/", http.NoBody)
	if err != nil {
		// Only a method that is no HTTP token gets here.
		return events.APIGatewayProxyResponse{StatusCode: http.StatusMethodNotAllowed}
	}
	r.URL = &url.URL{Path: p}
	r.RequestURI = p
	for k, vs := range req.MultiValueHeaders {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	for k, v := range req.Headers {
		if r.Header.Get(k) == "" {
			r.Header.Set(k, v)
		}
	}
	w := &recorder{header: http.Header{}}
	h.ServeHTTP(w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	// API Gateway sets the length of what it sends.
	w.header.Del("Content-Length")
	resp := events.APIGatewayProxyResponse{StatusCode: w.status, Headers: map[string]string{}}
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
	// The files are text, which passes as is (like the API's JSON); any
	// other bytes go base64-encoded, which API Gateway decodes since the
	// API declares every type binary (BinaryMediaTypes */*).
	if utf8.Valid(w.body.Bytes()) {
		resp.Body = w.body.String()
	} else {
		resp.Body = base64.StdEncoding.EncodeToString(w.body.Bytes())
		resp.IsBase64Encoded = true
	}
	return resp
}

// recorder is the http.ResponseWriter of one console reply.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
