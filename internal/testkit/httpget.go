package testkit

import (
	"io"
	"net/http"
	"testing"
)

// Get GETs url with the header h (may be nil) and returns the reply, its
// body read whole and closed; any failure to get one ends the test.
func Get(t testing.TB, url string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return res, b
}
