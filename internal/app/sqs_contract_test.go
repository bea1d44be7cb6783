package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// The AWS routes' replies the export tests see are checked against
// api/openapi.yaml, as the server harness checks `evs serve`'s: the 202
// of an export job exists only here.

var (
	contractOnce   sync.Once
	contractRouter routers.Router
	// contractSpec is the document contractRouter routes by.
	contractSpec *openapi3.T
	contractErr  error
)

// checkContract validates the reply of GET path?query against the
// contract.
func checkContract(t *testing.T, path string, query map[string]string, resp events.APIGatewayProxyResponse) {
	t.Helper()
	loadContractRouter(t)
	q := url.Values{}
	for k, v := range query {
		q.Set(k, v)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://evs.test"+path+"?"+q.Encode(), nil)
	route, params, err := contractRouter.FindRoute(req)
	if err != nil {
		t.Fatalf("GET %s: no route in the contract: %v", path, err)
	}
	header := http.Header{}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			header.Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		header.Set(k, v)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: header,
		Body: io.NopCloser(bytes.NewReader([]byte(resp.Body))), Options: in.Options,
	}); err != nil {
		t.Errorf("GET %s → %d does not match api/openapi.yaml: %v\nbody: %.500s", path, resp.StatusCode, err, resp.Body)
	}
}

// loadContractRouter loads api/openapi.yaml once, routed by path alone.
func loadContractRouter(t *testing.T) {
	t.Helper()
	contractOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile("../../api/openapi.yaml")
		if err == nil {
			err = doc.Validate(loader.Context)
		}
		if err != nil {
			contractErr = err
			return
		}
		doc.Servers = nil
		contractSpec = doc
		contractRouter, contractErr = legacy.NewRouter(doc)
	})
	if contractErr != nil {
		t.Fatalf("api/openapi.yaml: %v", contractErr)
	}
}
