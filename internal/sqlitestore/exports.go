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
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Exports are files under the data directory, not rows: a list of tens of
// MB that lives 15 minutes has no place in the database or its backups.
// Export id is dir/exports/id.csv, the list, and id.json, its record,
// written last so a record always has its list. The id is named by its
// account, batch and filters, so the same list asked again is served again
// while its batch's version is unchanged and it has exportReuse left.
const exportsDir = "exports"

// exportRecord says whose an export is, of which version of its batch,
// and until when its tokens work. Only the tokens' hashes are kept, as
// for uploads; the latest maxExportTokens.
type exportRecord struct {
	AccountID   string   `json:"accountId"`
	BatchID     string   `json:"batchId"`
	Version     string   `json:"version"`
	ExpiresAt   int64    `json:"expiresAt"` // Unix milliseconds
	TokenHashes [][]byte `json:"tokenHashes"`
}

// Reuse of an export: one with less than exportReuse left is written
// again, so a URL handed out always has that long to start its download.
const (
	exportReuse     = 5 * time.Minute
	maxExportTokens = 32
)

var exportNamespace = uuid.MustParse("1b0e7c1e-5a43-4f6e-9d0e-3c2f8b7a6d51")

func noExport() error {
	return evs.Errorf(evs.CodeNotFound, "No such export (unknown or expired).")
}

// Export stores batchID's result list of accountID under filters, as
// write writes it, and returns the URL it is served at without a key
// until it expires (api.Exports): origin + /v1/exports/{id}?token=...,
// answered by OpenExport.
func (s *Store) Export(ctx context.Context, accountID, batchID, filters, version, origin string, write func(w io.Writer) error) (string, time.Time, error) {
	token, hash, err := newToken()
	if err != nil {
		return "", time.Time{}, err
	}
	id := uuid.NewSHA1(exportNamespace, []byte(accountID+"\x00"+batchID+"\x00"+filters)).String()
	dir := filepath.Join(s.dir, exportsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", time.Time{}, fileErr("store export", err)
	}
	// The lock is not held while the list is written: two calls that
	// find no export both write it, and the second's rename wins.
	s.exportMu.Lock()
	defer s.exportMu.Unlock()
	rec, err := readExportRecord(dir, id)
	expires := time.UnixMilli(rec.ExpiresAt).UTC()
	if reusable := func() bool {
		return err == nil && rec.Version == version && rec.ExpiresAt >= millis(s.now().Add(exportReuse))
	}; !reusable() {
		s.exportMu.Unlock()
		werr := writeFileAtomic(dir, id+".csv", write)
		s.exportMu.Lock()
		if werr != nil {
			return "", time.Time{}, werr
		}
		if rec, err = readExportRecord(dir, id); !reusable() {
			expires = s.now().Add(evs.ExportTTL).UTC()
			rec = exportRecord{AccountID: accountID, BatchID: batchID, Version: version, ExpiresAt: millis(expires)}
		}
	}
	rec.TokenHashes = append(rec.TokenHashes, hash)
	rec.TokenHashes = rec.TokenHashes[max(len(rec.TokenHashes)-maxExportTokens, 0):]
	raw, err := json.Marshal(rec)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := writeFileAtomic(dir, id+".json", func(w io.Writer) error { _, err := w.Write(raw); return err }); err != nil {
		_ = os.Remove(filepath.Join(dir, id+".csv"))
		return "", time.Time{}, err
	}
	return origin + "/v1/exports/" + id + "?token=" + token, expires, nil
}

func readExportRecord(dir, id string) (exportRecord, error) {
	var rec exportRecord
	raw, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err == nil {
		err = json.Unmarshal(raw, &rec)
	}
	return rec, err
}

// writeFileAtomic writes dir/name, as write writes it, whole or not at
// all. An error of write's own is returned as it is; one of the file, as
// the store's.
func writeFileAtomic(dir, name string, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return fileErr("store export", err)
	}
	fw := &fileWriter{w: bufio.NewWriterSize(f, 64<<10)}
	werr := write(fw)
	err = cmp.Or(fw.w.Flush(), f.Close())
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
	rec, err := readExportRecord(dir, id)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, noExport()
	}
	if err != nil {
		return "", nil, fileErr("read export", err)
	}
	if !slices.ContainsFunc(rec.TokenHashes, func(h []byte) bool { return tokenIs(token, h) }) || rec.ExpiresAt <= millis(s.now()) {
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
		if rec, err := readExportRecord(dir, id); err == nil && rec.ExpiresAt > now {
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
