package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// A batch made from a CSV list keeps the user's rows: its results CSV is
// the user's file, every row in order, with the verdict columns appended.
// The rows are a file of their own, spooled to local disk while the list
// is read (memory stays one record), stored (RowStore) before the batch
// is, and joined to the results by seq on export: first occurrences have
// increasing seqs, so one pass of each joins them; a duplicate reads its
// verdict by seq.
//
// The rows file is CSV after a fixed-size first line rowsMetaBytes long:
//
//	evs-rows 1 <delimiter byte> <widest record> <has header 0|1> <BOM 0|1> <CRLF 0|1>
//
// (older files end after the header's), then one record per row: "h" (the
// header), the address's seq or "" (no address); the line; the line it
// repeats; the user's fields.

// RowStore keeps the rows of batches made from CSV lists; without it, CSV
// batches export one row per distinct address, as JSON ones do.
type RowStore interface {
	// PutRows stores rows, size bytes, as the rows of the account's batch
	// batchID, kept until expires; a second put replaces the first.
	PutRows(ctx context.Context, accountID, batchID string, expires time.Time, rows io.Reader, size int64) error
	// OpenRows returns a batch's rows, for the caller to close; found is
	// false when it has none.
	OpenRows(ctx context.Context, accountID, batchID string) (rows io.ReadCloser, found bool, err error)
}

const (
	// rowsMetaBytes is the length of a rows file's first line,
	// space-padded: written last, in place, once the widest record is known.
	rowsMetaBytes = 64
	rowsMagic     = "evs-rows 1"
)

// verdictColumns are the columns appended to the user's rows: csvHeader's
// but the address, then the row's line and the line it repeats. Prefixed:
// a user's file may have a "status" column of its own.
var verdictColumns = func() []string {
	out := make([]string, 0, len(csvHeader)+1)
	for _, c := range csvHeader[1:] {
		out = append(out, "evs_"+c)
	}
	return append(out, "evs_line", "evs_duplicate_of_line")
}()

// rowSpool is a batch's rows while its list is read: a temporary file,
// and what the list needs to tell each row's seq and duplicates.
type rowSpool struct {
	f         *os.File
	bw        *bufio.Writer
	cw        *csv.Writer
	width     int
	hasHeader bool
	lines     []int32 // lines[seq] is the line of its first row
	// last is what addressList.add made of the last address.
	last struct {
		seq int
		dup bool
	}
	rec []string
}

func newRowSpool(dir string) (*rowSpool, error) {
	f, err := os.CreateTemp(dir, "evs-rows-*")
	if err != nil {
		return nil, evs.Wrap(err, evs.CodeUnavailable, "The list could not be read; retry.")
	}
	// Unlinked at once: a process killed mid-list (a Lambda timeout)
	// leaves no file behind in a /tmp that outlives the invocation.
	_ = os.Remove(f.Name())
	s := &rowSpool{f: f}
	s.bw = bufio.NewWriterSize(f, 64<<10)
	s.cw = csv.NewWriter(s.bw)
	_, _ = s.bw.Write(bytes.Repeat([]byte{' '}, rowsMetaBytes))
	return s, nil
}

// row writes one record of the list, after addressList.add saw its address.
func (s *rowSpool) row(r CSVRecord) error {
	s.rec = s.rec[:0]
	switch {
	case r.Header:
		s.hasHeader = true
		s.rec = append(s.rec, "h", strconv.Itoa(r.Line), "")
	case r.HasAddress && s.last.dup:
		s.rec = append(s.rec, strconv.Itoa(s.last.seq), strconv.Itoa(r.Line), strconv.Itoa(int(s.lines[s.last.seq])))
	case r.HasAddress:
		s.lines = append(s.lines, int32(r.Line))
		s.rec = append(s.rec, strconv.Itoa(s.last.seq), strconv.Itoa(r.Line), "")
	default:
		s.rec = append(s.rec, "", strconv.Itoa(r.Line), "")
	}
	for _, f := range r.Fields {
		s.rec = append(s.rec, string(f))
	}
	s.width = max(s.width, len(r.Fields))
	return s.cw.Write(s.rec)
}

// finish writes the rows file's first line and returns the file, read
// from its start, and its size.
func (s *rowSpool) finish(shape CSVShape) (io.Reader, int64, error) {
	s.cw.Flush()
	if err := s.cw.Error(); err != nil {
		return nil, 0, err
	}
	if err := s.bw.Flush(); err != nil {
		return nil, 0, err
	}
	bit := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	meta := fmt.Sprintf("%s %d %d %d %d %d", rowsMagic, shape.Delimiter, s.width, bit(s.hasHeader), bit(shape.BOM), bit(shape.CRLF))
	line := append([]byte(meta), bytes.Repeat([]byte{' '}, rowsMetaBytes-1-len(meta))...)
	line = append(line, '\n')
	if _, err := s.f.WriteAt(line, 0); err != nil {
		return nil, 0, err
	}
	size, err := s.f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, 0, err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	return s.f, size, nil
}

func (s *rowSpool) close() {
	if s == nil {
		return
	}
	name := s.f.Name()
	_ = s.f.Close()
	_ = os.Remove(name)
}

// readRows reads a CSV list from r into l, keeping its rows in a spool
// (else nil) when keep is set.
func readRows(r io.Reader, lim ListLimits, lay CSVLayout, l *addressList, keep bool) (*rowSpool, CSVShape, error) {
	if !keep {
		_, err := ReadListCSV(r, lim, lay, l.add, nil)
		return nil, CSVShape{}, err
	}
	sp, err := newRowSpool("")
	if err != nil {
		return nil, CSVShape{}, err
	}
	l.rows = sp
	shape, err := ReadListCSV(r, lim, lay, l.add, sp.row)
	if err != nil {
		l.rows = nil
		sp.close()
		return nil, CSVShape{}, err
	}
	return sp, shape, nil
}

// rowsMeta is what the export reads of a rows file's first line: the
// delimiter and whether there is a header are the file's own record.
type rowsMeta struct {
	width     int
	bom, crlf bool
}

func parseRowsMeta(b []byte) (rowsMeta, error) {
	var m rowsMeta
	var delim, header, bom, crlf int
	var magic1, magic2 string
	n, err := fmt.Sscanf(string(bytes.TrimSpace(b)), "%s %s %d %d %d %d %d", &magic1, &magic2, &delim, &m.width, &header, &bom, &crlf)
	if n < 5 || err != nil && n != 5 || magic1+" "+magic2 != rowsMagic {
		return m, errors.New("api: not a rows file")
	}
	m.bom, m.crlf = bom == 1, crlf == 1
	return m, nil
}

// rowsJoin writes a batch's rows with their verdicts, for csvRows.
type rowsJoin struct {
	rc   io.ReadCloser
	r    *csv.Reader
	meta rowsMeta
	// page holds results read in seq order, from index pi, up to seq after.
	page    []evs.Result
	pi      int
	after   int
	drained bool
	out     []string
}

func openRowsJoin(ctx context.Context, rs RowStore, account, batch string) (*rowsJoin, error) {
	rc, found, err := rs.OpenRows(ctx, account, batch)
	if err != nil || !found {
		return nil, err
	}
	br := bufio.NewReaderSize(rc, 64<<10)
	line := make([]byte, rowsMetaBytes)
	if _, err := io.ReadFull(br, line); err != nil {
		rc.Close()
		return nil, fmt.Errorf("api: read rows: %w", err)
	}
	meta, err := parseRowsMeta(line)
	if err != nil {
		rc.Close()
		return nil, err
	}
	r := csv.NewReader(br)
	r.FieldsPerRecord, r.ReuseRecord = -1, true
	return &rowsJoin{rc: rc, r: r, meta: meta, after: -1}, nil
}

func (j *rowsJoin) close() {
	if j != nil {
		j.rc.Close()
	}
}

// newWriter is the CSV writer of the export: commas whatever the list's
// delimiter (a results CSV is RFC 4180 for every batch), the file's own
// line ends, and its BOM back (begin): Excel on Windows reads a file
// without one as its local code page.
func (j *rowsJoin) newWriter(w io.Writer) *csv.Writer {
	cw := csv.NewWriter(w)
	cw.UseCRLF = j.meta.crlf
	return cw
}

func (j *rowsJoin) begin(w io.Writer) error {
	if !j.meta.bom {
		return nil
	}
	_, err := io.WriteString(w, "\ufeff")
	return err
}

// headerRow is the first row of the export: the user's header (blank
// names where there are none), then ours.
func (j *rowsJoin) headerRow(fields []string) []string {
	return append(j.userFields(fields), verdictColumns...)
}

// userFields starts an output row with the user's fields, made safe for
// spreadsheets and padded to the widest record.
func (j *rowsJoin) userFields(fields []string) []string {
	j.out = j.out[:0]
	for i := range j.meta.width {
		v := ""
		if i < len(fields) {
			v = csvSafe(fields[i])
		}
		j.out = append(j.out, v)
	}
	return j.out
}

// next reads the next record: its user fields, seq (-1 for none), line,
// the line it repeats (0 for none), whether it is the header; io.EOF
// after the last.
func (j *rowsJoin) next() (fields []string, seq int, line, dupOf string, header bool, err error) {
	rec, err := j.r.Read()
	if err != nil {
		return nil, 0, "", "", false, err
	}
	if len(rec) < 3 {
		return nil, 0, "", "", false, errors.New("api: a rows record is short")
	}
	seq = -1
	switch rec[0] {
	case "h":
		header = true
	case "":
	default:
		if seq, err = strconv.Atoi(rec[0]); err != nil {
			return nil, 0, "", "", false, errors.New("api: a rows record has a bad seq")
		}
	}
	return rec[3:], seq, rec[1], rec[2], header, nil
}

// result finds seq's written result: a first occurrence in the results
// read a page at a time, a duplicate's in the page or read on its own.
func (j *rowsJoin) result(ctx context.Context, rr ResultReader, account, batch string, seq int, dup bool) (evs.Result, bool, error) {
	if dup {
		if k, ok := slices.BinarySearchFunc(j.page, seq, func(r evs.Result, s int) int { return r.Seq - s }); ok {
			return j.page[k], true, nil
		}
		rs, err := rr.Results(ctx, account, batch, seq-1, 1, "")
		if err != nil || len(rs) == 0 || rs[0].Seq != seq {
			return evs.Result{}, false, err
		}
		return rs[0], true, nil
	}
	for {
		for ; j.pi < len(j.page); j.pi++ {
			switch r := j.page[j.pi]; {
			case r.Seq == seq:
				return r, true, nil
			case r.Seq > seq:
				return evs.Result{}, false, nil // not written yet
			}
		}
		if j.drained {
			return evs.Result{}, false, nil
		}
		rs, err := rr.Results(ctx, account, batch, j.after, MaxPageLimit, "")
		if err != nil {
			return evs.Result{}, false, err
		}
		j.page, j.pi, j.drained = rs, 0, len(rs) < MaxPageLimit
		if len(rs) > 0 {
			j.after = rs[len(rs)-1].Seq
		}
	}
}

// dataRow is an output row: the user's fields, then the verdict (blank
// when there is none).
func (j *rowsJoin) dataRow(fields []string, r *evs.Result, line, dupOf string) []string {
	out := j.userFields(fields)
	if r == nil {
		return append(append(out, make([]string, len(verdictColumns)-2)...), line, dupOf)
	}
	return append(appendVerdict(out, r.Decision), line, dupOf)
}

// appendVerdict appends a decision's CSV cells after the address, as
// csvHeader names them, to row (reused from row to row).
func appendVerdict(row []string, d evs.Decision) []string {
	sugg := ""
	if d.Suggestion != nil {
		sugg = *d.Suggestion
	}
	return append(row,
		string(d.Status()), string(d.Reason), csvSafe(sugg),
		strconv.FormatBool(d.Flags.Disposable), strconv.FormatBool(d.Flags.Role),
		strconv.FormatBool(d.Flags.Free), csvMaybe(d.Flags.AcceptAll, d.Flags.AcceptAllUnknown),
		string(d.Checks.SMTP.Provider), strconv.Itoa(verify.Score(d)),
	)
}

// putRows stores the rows of list, if it kept them, as batch b's, charged
// to held first.
func (h *Handler) putRows(ctx context.Context, b evs.Batch, list *addressList, held *Hold) error {
	rs, ok := h.d.Batches.(RowStore)
	if !ok || list.rows == nil {
		return nil
	}
	r, size, err := list.rows.finish(list.shape)
	if err != nil {
		return evs.Wrap(err, evs.CodeUnavailable, "The list's rows could not be kept; retry.")
	}
	if err := held.Add(ctx, size); err != nil {
		return err
	}
	if err := rs.PutRows(ctx, b.AccountID, b.ID, b.ExpiresAt, r, size); err != nil {
		h.dropRows(ctx, b, list)
		return err
	}
	return nil
}

// dropRows removes the rows stored for batch b, which was not created
// after all; what a failure leaves expires with it.
func (h *Handler) dropRows(ctx context.Context, b evs.Batch, list *addressList) {
	rs, ok := h.d.Batches.(RowStore)
	if !ok || list.rows == nil {
		return
	}
	if err := rs.PutRows(context.WithoutCancel(ctx), b.AccountID, b.ID, b.ExpiresAt, strings.NewReader(""), 0); err != nil {
		h.d.Logger.WarnContext(ctx, "could not remove the rows of a batch not created", "batchId", b.ID, "error", err.Error())
	}
}
