package sqlitestore

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Exports (GET /v1/requests/{id}/export) are files under the data
// directory, not rows: a result list of tens of MB that lives 15 minutes
// has no place in the database or its backups. Export id is two files in
// dir/exports/: id.csv, the list, and id.json, its record (exportRecord).
// The record is written last, so a record always has its list; the sweep
// deletes both once the record has expired, and any file left without a
// record (a crash between the two) once it is older than evs.ExportTTL.

// exportsDir is the directory of exports under the data directory.
const exportsDir = "exports"

// exportRecord says whose an export is and until when its token works.
// Only the token's hash is kept, as for uploads.
type exportRecord struct {
	AccountID string `json:"accountId"`
	BatchID   string `json:"batchId"`
	ExpiresAt int64  `json:"expiresAt"` // Unix milliseconds
	TokenHash []byte `json:"tokenHash"`
}

func noExport() error {
	return evs.Errorf(evs.CodeNotFound, "No such export (unknown or expired).")
}

// Export stores batchID's result list of accountID, as write writes it,
// and returns the URL it is served at without a key until it expires
// (api.Exports): origin + /v1/exports/{id}?token=..., which `evs serve`
// answers with OpenExport. The list goes to its file as it is written, so
// a list of any length costs the same memory.
func (s *Store) Export(ctx context.Context, accountID, batchID, origin string, write func(w io.Writer) error) (string, time.Time, error) {
	token, hash, err := newToken()
	if err != nil {
		return "", time.Time{}, err
	}
	id := uuid.NewString()
	expires := s.now().Add(evs.ExportTTL).UTC()
	rec, err := json.Marshal(exportRecord{AccountID: accountID, BatchID: batchID, ExpiresAt: millis(expires), TokenHash: hash})
	if err != nil {
		return "", time.Time{}, err
	}
	dir := filepath.Join(s.dir, exportsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", time.Time{}, fileErr("store export", err)
	}
	if err := writeFileAtomic(dir, id+".csv", write); err != nil {
		return "", time.Time{}, err
	}
	if err := writeFileAtomic(dir, id+".json", func(w io.Writer) error { _, err := w.Write(rec); return err }); err != nil {
		_ = os.Remove(filepath.Join(dir, id+".csv"))
		return "", time.Time{}, err
	}
	return origin + "/v1/exports/" + id + "?token=" + token, expires, nil
}

// writeFileAtomic writes dir/name, as write writes it, whole or not at
// all: a reader never sees half a list. An error of write's own (the
// results it reads) is returned as it is; one of the file, as a fault of
// the store.
func writeFileAtomic(dir, name string, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return fileErr("store export", err)
	}
	fw := &fileWriter{w: bufio.NewWriterSize(f, 64<<10)}
	werr := write(fw)
	err = fw.w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if werr == nil && err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if werr == nil && err == nil {
		return nil
	}
	_ = os.Remove(f.Name())
	if werr != nil && fw.err == nil {
		return werr
	}
	return fileErr("store export", cmp.Or(fw.err, err, werr))
}

// fileWriter remembers the first error of the file under it, so that a
// failed write is classified as the disk's, not the caller's.
type fileWriter struct {
	w   *bufio.Writer
	err error
}

func (fw *fileWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if err != nil && fw.err == nil {
		fw.err = err
	}
	return n, err
}

// fileErr classifies a failed file operation of the exports: a full or
// failing disk is worth a retry, as SQLITE_FULL and SQLITE_IOERR are.
func fileErr(op string, err error) error {
	return store.Unavailable(fmt.Errorf("sqlitestore: %s: %w", op, err))
}

// OpenExport returns export id's list, opened, and the ID of its batch, if
// token is the export's and it has not expired by the store's clock. It
// answers CodeNotFound for an unknown or expired export or a wrong token
// (not told apart). The caller closes the file.
func (s *Store) OpenExport(ctx context.Context, id, token string) (batchID string, f *os.File, err error) {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		// Never a path: the ID names files in the exports directory.
		return "", nil, noExport()
	}
	dir := filepath.Join(s.dir, exportsDir)
	raw, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, noExport()
	}
	if err != nil {
		return "", nil, fileErr("read export", err)
	}
	var rec exportRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return "", nil, fmt.Errorf("sqlitestore: read export %s: %w", id, err)
	}
	if !tokenIs(token, rec.TokenHash) || rec.ExpiresAt <= millis(s.now()) {
		return "", nil, noExport()
	}
	f, err = os.Open(filepath.Join(dir, id+".csv"))
	if errors.Is(err, fs.ErrNotExist) {
		// The sweep took it between the two reads.
		return "", nil, noExport()
	}
	if err != nil {
		return "", nil, fileErr("open export", err)
	}
	return rec.BatchID, f, nil
}

// sweepExports deletes the exports expired by now (Unix milliseconds) and
// the files a crash left without a record; it returns how many exports it
// deleted. An export being downloaded stays readable on Unix until the
// download ends.
func (s *Store) sweepExports(now int64) (int, error) {
	dir := filepath.Join(s.dir, exportsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fileErr("sweep exports", err)
	}
	kept := map[string]bool{}
	n := 0
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var rec exportRecord
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && json.Unmarshal(raw, &rec) == nil && rec.ExpiresAt > now {
			kept[id] = true
			continue
		}
		// The list first: a record never outlives its list.
		_ = os.Remove(filepath.Join(dir, id+".csv"))
		if err := os.Remove(filepath.Join(dir, e.Name())); err == nil {
			n++
		}
	}
	old := time.UnixMilli(now).Add(-evs.ExportTTL)
	for _, e := range entries {
		id, isCSV := strings.CutSuffix(e.Name(), ".csv")
		orphan := strings.HasPrefix(e.Name(), ".tmp-") || isCSV && !kept[id]
		if !orphan {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(old) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return n, nil
}
