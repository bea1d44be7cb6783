package server_test

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

// rowsCSV is a CSV list of about size bytes: one address, then rows
// without one, which a batch keeps all the same.
func rowsCSV(size int) string {
	var b strings.Builder
	b.WriteString("email,note\nfirst@x.example,a\n")
	row := "," + strings.Repeat("n", 98) + "\n"
	for b.Len()+len(row) <= size {
		b.WriteString(row)
	}
	return b.String()
}

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil && !d.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Error(err)
	}
	return n
}

// TestStoredBytesQuota: the storage quota counts bytes, rows without an
// address included. Twelve lists of nearly 6 MiB, each one address and
// rows without one, under a 32 MiB quota: the first four or five are
// created (each keeps a little more than its body), and every later one is 429 rate_limited naming the quota, with a
// Retry-After; the data directory grows by less than 64 MiB. A test-mode
// account's quota is a tenth: one such list is refused at once.
func TestStoredBytesQuota(t *testing.T) {
	t.Parallel()
	h := start(t, options{server: func(o *server.Options) { o.Config.MaxStoredBytes = 32 << 20 }})
	body := rowsCSV(6<<20 - 4096)
	post := func(key string) reply {
		return h.do(req{method: http.MethodPost, path: "/v1/requests?mode=quick", key: key, body: body, headers: map[string]string{"Content-Type": "text/csv"}})
	}
	before := dirBytes(t, h.dir)
	created := 0
	for i := range 12 {
		r := post(h.liveKey)
		switch {
		case r.status == http.StatusCreated && created == i:
			created++
		case r.status == http.StatusTooManyRequests && r.errorCode(t) == "rate_limited" && r.header.Get("Retry-After") != "" &&
			strings.Contains(string(r.body), "storage quota (33554432 bytes"):
		default:
			t.Fatalf("list %d: %d %v %s", i+1, r.status, r.header, r.body)
		}
	}
	// Each list keeps its rows (a little over its body) and its items:
	// four or five fit, never more.
	if created < 4 || created > 5 {
		t.Fatalf("%d lists of 6 MiB created under a 32 MiB quota, want 4 or 5", created)
	}
	if grown := dirBytes(t, h.dir) - before; grown >= 64<<20 {
		t.Fatalf("the data directory grew by %d bytes, want < 64 MiB", grown)
	}
	if r := post(h.testKey); r.status != http.StatusTooManyRequests {
		t.Fatalf("a test-mode account's list over a tenth of the quota: %d %s", r.status, r.body)
	}
}

// exportOf asks for batch id's export and returns its URL's path and the
// reply.
func (h *harness) exportOf(key, id string) (string, reply) {
	h.t.Helper()
	r := h.do(req{path: "/v1/requests/" + id + "/export", key: key})
	var out struct {
		URL string `json:"url"`
	}
	_ = json.Unmarshal(r.body, &out)
	u, _ := url.Parse(out.URL)
	if u == nil {
		return "", r
	}
	return u.Path, r
}

// exportFiles lists the files of the exports directory.
func exportFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "exports"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestExportStopsBelowWatermark: the free-space watermark is checked
// while an export is written, not only when the call starts. On a disk
// whose free space is what the exports leave of a fixed room, an export
// that would take it below EVS_MIN_FREE_BYTES stops midway: 503
// unavailable with a Retry-After, and no file of it is left. Once the
// room is there, the same export is written.
func TestExportStopsBelowWatermark(t *testing.T) {
	t.Parallel()
	const minFree = 64 << 20
	var dir string
	var room int64 = 3 << 20
	h := start(t, options{server: func(o *server.Options) {
		o.Config.MinFreeBytes = minFree
		o.FreeBytes = func() (uint64, error) {
			return uint64(minFree + room - dirBytes(t, filepath.Join(dir, "exports"))), nil
		}
	}})
	dir = h.dir
	r := h.do(req{method: http.MethodPost, path: "/v1/requests?mode=quick", key: h.liveKey, body: rowsCSV(5 << 20), headers: map[string]string{"Content-Type": "text/csv"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	if _, r := h.exportOf(h.liveKey, id); r.status != http.StatusServiceUnavailable || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("an export past the free space: %d %v %s; want 503", r.status, r.header, r.body)
	}
	if files := exportFiles(t, h.dir); len(files) != 0 {
		t.Fatalf("files left of a stopped export: %v", files)
	}
	room = 64 << 20
	if _, r := h.exportOf(h.liveKey, id); r.status != http.StatusOK {
		t.Fatalf("the export with room: %d %s", r.status, r.body)
	}
}

// TestExportReused: asking again for the export of an unchanged batch
// under the same filters serves the same file, under a new token that
// works as the first does; other filters are another file.
func TestExportReused(t *testing.T) {
	h := start(t, options{})
	r := h.do(req{method: http.MethodPost, path: "/v1/requests?mode=quick", key: h.liveKey, body: rowsCSV(64 << 10), headers: map[string]string{"Content-Type": "text/csv"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	h.poll(h.liveKey, id, time.Minute)
	first, r1 := h.exportOf(h.liveKey, id)
	again, r2 := h.exportOf(h.liveKey, id)
	if r1.status != http.StatusOK || r2.status != http.StatusOK || first == "" || first != again || string(r1.body) == string(r2.body) {
		t.Fatalf("two exports: %s then %s; want one file, two tokens", r1.body, r2.body)
	}
	if files := exportFiles(t, h.dir); len(files) != 2 {
		t.Fatalf("export files %v, want one list and its record", files)
	}
	for _, r := range []reply{r1, r2} {
		var out struct{ URL string }
		_ = json.Unmarshal(r.body, &out)
		if got := h.do(req{path: strings.TrimPrefix(out.URL, h.base)}); got.status != http.StatusOK || !strings.Contains(string(got.body), "first@x.example") {
			t.Fatalf("download %s: %d %.200s", out.URL, got.status, got.body)
		}
	}
	if other, r := h.exportOf(h.liveKey, id+"?layout=results"); r.status != http.StatusOK || other == first {
		t.Fatalf("another filter's export: %s %s", other, r.body)
	}
}
