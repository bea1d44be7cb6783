package lambda_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
)

// seen is what a handler behind Proxy was handed.
type seen struct {
	method, path, query, host, remote, rid string
	body                                   string
	bodyErr                                error
	length                                 int64
	principal                              evs.Principal
	authenticated                          bool
	header                                 http.Header
}

func recordTo(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		*s = seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, host: r.Host, remote: r.RemoteAddr,
			rid: evs.RequestIDFromContext(r.Context()), body: string(b), bodyErr: err, length: r.ContentLength, header: r.Header}
		s.principal, s.authenticated = evs.PrincipalFromContext(r.Context())
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Add("Vary", "A")
		w.Header().Add("Vary", "B")
		w.Header().Set("Content-Length", "999")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "ok")
	})
}

// TestProxyRequest: an event becomes the request a net/http handler expects.
func TestProxyRequest(t *testing.T) {
	auth := map[string]any{"principalId": "k1", "accountId": "acct-1", "keyId": "k1", "testMode": "true"}
	for _, tc := range []struct {
		name string
		ev   events.APIGatewayProxyRequest
		want seen
	}{
		{
			name: "a route with a parameter, under a custom domain's base path",
			ev: events.APIGatewayProxyRequest{
				Resource: "/v1/requests/{id}/results", Path: "/evs/v1/requests/abc/results", HTTPMethod: http.MethodGet,
				PathParameters:                  map[string]string{"id": "abc"},
				MultiValueQueryStringParameters: map[string][]string{"limit": {"5", "7"}},
				QueryStringParameters:           map[string]string{"limit": "7", "status": "risky"},
				MultiValueHeaders:               map[string][]string{"X-Multi": {"a", "b"}, "Host": {"api.example"}},
				RequestContext: events.APIGatewayProxyRequestContext{RequestID: "rid-1", Authorizer: auth,
					Identity: events.APIGatewayRequestIdentity{SourceIP: "203.0.113.9"}},
			},
			want: seen{method: "GET", path: "/v1/requests/abc/results", query: "limit=5&limit=7&status=risky", host: "api.example",
				remote: "203.0.113.9:0", rid: "rid-1", principal: evs.Principal{AccountID: "acct-1", KeyID: "k1", Test: true}, authenticated: true},
		},
		{
			name: "a binary body, an IPv6 client, no authorizer",
			ev: events.APIGatewayProxyRequest{
				Resource: "/v1/verify", Path: "/v1/verify", HTTPMethod: http.MethodPost,
				Body: base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe}), IsBase64Encoded: true,
				RequestContext: events.APIGatewayProxyRequestContext{RequestID: "rid-2",
					Identity: events.APIGatewayRequestIdentity{SourceIP: "2001:db8::1"}},
			},
			want: seen{method: "POST", path: "/v1/verify", remote: "[2001:db8::1]:0", rid: "rid-2", body: "\xff\xfe", length: 2},
		},
		{
			name: "the console's root resource keeps its slash",
			ev:   events.APIGatewayProxyRequest{Resource: "/console", Path: "/console/", HTTPMethod: http.MethodGet},
			want: seen{method: "GET", path: "/console/"},
		},
		{
			name: "a greedy parameter",
			ev: events.APIGatewayProxyRequest{Resource: "/console/{proxy+}", Path: "/Prod/console/a/b.css", HTTPMethod: http.MethodGet,
				PathParameters: map[string]string{"proxy": "a/b.css"}},
			want: seen{method: "GET", path: "/console/a/b.css"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got seen
			resp, err := lambda.Proxy(recordTo(&got))(context.Background(), tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if got.method != tc.want.method || got.path != tc.want.path || got.query != tc.want.query || got.host != tc.want.host ||
				got.remote != tc.want.remote || got.rid != tc.want.rid || got.body != tc.want.body || got.length != tc.want.length ||
				!reflect.DeepEqual(got.principal, tc.want.principal) || got.authenticated != tc.want.authenticated || got.bodyErr != nil {
				t.Errorf("handed %+v\nwant %+v", got, tc.want)
			}
			if tc.ev.MultiValueHeaders != nil && strings.Join(got.header.Values("X-Multi"), ",") != "a,b" {
				t.Errorf("headers %v", got.header)
			}
			if resp.StatusCode != http.StatusAccepted || resp.Body != "ok" || resp.IsBase64Encoded ||
				resp.Headers["Content-Type"] != "text/plain" || strings.Join(resp.MultiValueHeaders["Vary"], ",") != "A,B" {
				t.Errorf("response %+v", resp)
			}
			if _, ok := resp.Headers["Content-Length"]; ok {
				t.Errorf("Content-Length passed on: API Gateway sets its own")
			}
		})
	}
}

// TestProxyBadBase64: a body that is not base64 fails the handler's read
// with an invalid_request error, so the handler answers it like any body
// it cannot read.
func TestProxyBadBase64(t *testing.T) {
	var got seen
	_, err := lambda.Proxy(recordTo(&got))(context.Background(), events.APIGatewayProxyRequest{
		Resource: "/v1/verify", HTTPMethod: http.MethodPost, Body: "%%%", IsBase64Encoded: true})
	if err != nil {
		t.Fatal(err)
	}
	if evs.ErrorCode(got.bodyErr) != evs.CodeInvalidRequest || !strings.Contains(evs.ErrorMessage(got.bodyErr), "base64") {
		t.Fatalf("read error %v", got.bodyErr)
	}
}

// TestProxyBinaryReply: a reply that is not UTF-8 goes base64-encoded.
func TestProxyBinaryReply(t *testing.T) {
	png := []byte{0x89, 'P', 'N', 'G', 0xff, 0x00}
	resp, _ := lambda.Proxy(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(png)
	}))(context.Background(), events.APIGatewayProxyRequest{Path: "/x", HTTPMethod: http.MethodGet})
	b, err := base64.StdEncoding.DecodeString(resp.Body)
	if !resp.IsBase64Encoded || err != nil || string(b) != string(png) || resp.StatusCode != http.StatusOK {
		t.Fatalf("%+v", resp)
	}
}
