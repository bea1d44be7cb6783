package api

import (
	"encoding/json"
	"testing"
)

// TestWithRequestID: the id copied between quotes must read as
// encoding/json would write it, whatever the id holds.
func TestWithRequestID(t *testing.T) {
	for _, id := range []string{
		"3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "", `quo"te`, `back\slash`, "<tag>&", "tab\there", "é", "\x7f", "\xff",
	} {
		for _, body := range []string{`{"status":"deliverable"}`, `{}`, ``, `{ }`} {
			got := withRequestID([]byte(body), id)
			q, _ := json.Marshal(id)
			want := `{"requestId":` + string(q)
			switch body {
			case `{"status":"deliverable"}`:
				want += `,"status":"deliverable"}`
			case `{ }`:
				want += ` }`
			default:
				want += `}`
			}
			if string(got) != want {
				t.Errorf("withRequestID(%q, %q) = %s, want %s", body, id, got, want)
			}
			if !json.Valid(got) {
				t.Errorf("withRequestID(%q, %q) = %s: not JSON", body, id, got)
			}
		}
	}
}
