package metrics

import (
	"net/http"
	"strings"
	"time"
)

// Instrument counts every reply of next under its route template, matched
// from routes (paths like /v1/requests/{id}); a path no template matches is
// counted as "unmatched", so a client's path never becomes a label.
func Instrument(next http.Handler, routes []string, o Observer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		o.HTTPRequest(Route(r.URL.Path, routes), rec.code, time.Since(start))
	})
}

// Route returns the template of routes that path matches, or "unmatched".
// A {name} segment matches any one non-empty segment.
func Route(path string, routes []string) string {
	segs := strings.Split(path, "/")
outer:
	for _, rt := range routes {
		ts := strings.Split(rt, "/")
		if len(ts) != len(segs) {
			continue
		}
		for i, t := range ts {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				if segs[i] == "" {
					continue outer
				}
			} else if t != segs[i] {
				continue outer
			}
		}
		return rt
	}
	return "unmatched"
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
