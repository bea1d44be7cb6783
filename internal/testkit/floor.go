package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// FloorHandler is the floor the HTTP path of `evs serve` is measured
// against, in the load harness (infra/loadtest) and in the handler
// benchmarks (internal/server): a bare net/http handler that decodes the
// verify request as strictly as the API does and answers every call with a
// JSON body of n bytes (for an address of up to n-60 bytes), the real
// reply's size, and the same headers. No handler of ours can do less work
// per call, so ratios to it say how much the stack costs.
func FloorHandler(n int) http.Handler {
	pad := strings.Repeat("x", n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Email *string `json:"email"`
			Mode  *string `json:"mode"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 8<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil || in.Email == nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		// Built per call, as a handler would, padded to the real reply's
		// size.
		out := floorReply{Status: "deliverable", Email: *in.Email, Pad: pad[:max(0, n-floorOverhead-len(*in.Email))]}
		b, _ := json.Marshal(out)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("X-Request-Id", "00000000-0000-0000-0000-000000000000")
		w.Write(b)
	})
}

type floorReply struct {
	Status string `json:"status"`
	Email  string `json:"email"`
	Pad    string `json:"pad"`
}

// floorOverhead is the size of a reply with an empty address and pad.
var floorOverhead = func() int {
	b, _ := json.Marshal(floorReply{Status: "deliverable"})
	return len(b)
}()
