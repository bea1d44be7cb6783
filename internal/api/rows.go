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

// A batch made from a CSV list keeps the user's rows (contract, section
// 3): its results CSV is the user's file — header, every row in order,
// duplicates included — with the verdict columns appended. The rows are
// not the batch's items (one per distinct address, what the worker
// verifies) but a file of their own, written once while the list is read
// and read once per export, joined to the results by sequence number:
//
//   - while the list is read, each record is written to a spool file on
//     local disk (os.TempDir: /tmp on Lambda) with the seq of its address
//     and, for a duplicate, the line of the row that came first; memory
//     stays one record, whatever the list's length;
//   - the spool is stored with the batch (RowStore: database parts on
//     `evs serve`, an S3 object beside the batch's input on AWS) before
//     the batch is, so a batch that has rows always finds them;
//   - an export reads the rows in order and the results in seq order side
//     by side: first occurrences have increasing seqs, so one pass of each
//     joins them; a duplicate reads its verdict by seq.
//
// The rows file is CSV (comma, RFC 4180, as encoding/csv writes it),
// after a fixed-size first line rowsMetaBytes long:
//
//	evs-rows 1 <delimiter byte> <widest record> <has header 0|1> <BOM 0|1> <CRLF 0|1>
//
// (files written before the last two were kept end after the header's).
//
// then one record per row: kind-or-seq, line, duplicate-of line, then the
// user's fields. The first field is "h" on the header row, the address's
// seq on a row with one, empty on a row without an address.

// RowStore keeps the rows of batches made from CSV lists. The SQLite and
// DynamoDB stores implement it; a BatchStore that does not keeps no rows,
// and its CSV batches export one row per distinct address, as JSON ones
// do.
type RowStore interface {
	// PutRows stores rows, size bytes, as the rows of the account's batch
	// batchID, kept until expires. A second put for the same batch (a
	// retried creation) replaces the first.
	PutRows(ctx context.Context, accountID, batchID string, expires time.Time, rows io.Reader, size int64) error
	// OpenRows returns a batch's rows; found is false when it has none.
	// The caller closes them.
	OpenRows(ctx context.Context, accountID, batchID string) (rows io.ReadCloser, found bool, err error)
}

// rowsMetaBytes is the length of a rows file's first line, space-padded:
// written last, in place, once the widest record is known.
const rowsMetaBytes = 64

// rowsMagic starts a rows file's first line.
const rowsMagic = "evs-rows 1"

// verdictColumns are the columns appended to the user's rows: csvHeader's
// without the address (the user's own column holds it), then where the
// row is in the file and the row it repeats. Prefixed, because a user's
// file may well have a "status" or "score" column of its own.
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
	f     *os.File
	bw    *bufio.Writer
	cw    *csv.Writer
	width int
	// hasHeader is set once the header row is written.
	hasHeader bool
	// seqs maps an address's dedup key to its seq; lines[seq] is the line
	// of the row it first appeared on.
	seqs  map[string]int32
	lines []int32
	// last is what addressList.add made of the last address: its seq, and
	// whether it repeats an earlier one.
	last struct {
		seq int
		dup bool
	}
	rec []string
}

// newRowSpool starts a rows file in dir ("" for os.TempDir()).
func newRowSpool(dir string) (*rowSpool, error) {
	f, err := os.CreateTemp(dir, "evs-rows-*")
	if err != nil {
		return nil, evs.Wrap(err, evs.CodeUnavailable, "The list could not be read; retry.")
	}
	// Unlinked at once where the system allows (the open file stays
	// usable): a process killed mid-list — a Lambda timeout — leaves no
	// 100 MB file behind in a /tmp that outlives the invocation.
	_ = os.Remove(f.Name())
	s := &rowSpool{f: f, seqs: make(map[string]int32)}
	s.bw = bufio.NewWriterSize(f, 64<<10)
	s.cw = csv.NewWriter(s.bw)
	// The first line is written at the end, in place.
	_, _ = s.bw.Write(bytes.Repeat([]byte{' '}, rowsMetaBytes))
	return s, nil
}

// row writes one record of the list, after addressList.add has seen its
// address, if it has one.
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

// close removes the spool file; nil-safe.
func (s *rowSpool) close() {
	if s == nil {
		return
	}
	name := s.f.Name()
	_ = s.f.Close()
	_ = os.Remove(name)
}

// readRows reads a CSV list from r into l, keeping its rows in a spool
// when keep is set, and returns the spool (nil without one) and the
// delimiter. On error the spool is removed.
func readRows(r io.Reader, lim ListLimits, lay CSVLayout, l *addressList, keep bool) (*rowSpool, CSVShape, error) {
	if !keep {
		return nil, CSVShape{}, ReadListCSV(r, lim, lay, l.add)
	}
	sp, err := newRowSpool("")
	if err != nil {
		return nil, CSVShape{}, err
	}
	l.rows = sp
	shape, err := ReadListCSVRows(r, lim, lay, l.add, sp.row)
	if err != nil {
		l.rows = nil
		sp.close()
		return nil, CSVShape{}, err
	}
	return sp, shape, nil
}

// rowsMeta is a rows file's first line.
type rowsMeta struct {
	delim     rune
	width     int
	hasHeader bool
	bom, crlf bool
}

func parseRowsMeta(b []byte) (rowsMeta, error) {
	var m rowsMeta
	var d, h, bom, crlf int
	var magic1, magic2 string
	n, err := fmt.Sscanf(string(bytes.TrimSpace(b)), "%s %s %d %d %d %d %d", &magic1, &magic2, &d, &m.width, &h, &bom, &crlf)
	if n < 5 || err != nil && n != 5 || magic1+" "+magic2 != rowsMagic {
		return m, errors.New("api: not a rows file")
	}
	m.delim, m.hasHeader, m.bom, m.crlf = rune(d), h == 1, bom == 1, crlf == 1
	return m, nil
}

// rowsJoin writes a batch's rows with their verdicts, a record at a
// time, for csvRows.
type rowsJoin struct {
	rc   io.ReadCloser
	r    *csv.Reader
	meta rowsMeta
	// page holds results read in seq order, from index pi; after is the
	// last seq read, drained set once none are left.
	page    []evs.Result
	pi      int
	after   int
	drained bool
	out     []string
}

// openRowsJoin opens batch's rows from rs; nil when it has none.
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

// newWriter is the CSV writer of the export. It writes commas whatever
// the list's delimiter: a results CSV is RFC 4180 (text/csv) for every
// batch, which generic CSV readers — and API clients generated from the
// OpenAPI document — read without being told. The delimiter is kept in
// the rows file for a later choice of the client's. Line ends are the
// file's own (CR LF from Windows), and its BOM comes back (begin): Excel
// on Windows reads a file without one as its local code page.
func (j *rowsJoin) newWriter(w io.Writer) *csv.Writer {
	cw := csv.NewWriter(w)
	cw.UseCRLF = j.meta.crlf
	return cw
}

// begin starts the export, before its header row: the list's BOM, if it
// had one.
func (j *rowsJoin) begin(w io.Writer) error {
	if !j.meta.bom {
		return nil
	}
	_, err := io.WriteString(w, "\ufeff")
	return err
}

// headerRow is the first row of the export: the user's header (blank
// names where the file had none, or a row was wider), then ours. A file
// without a header row gets one, since the verdict columns need names.
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

// result finds seq's written result. First occurrences come in
// increasing seq order and are merged with the results read a page at a
// time; a duplicate's seq is behind them, found in the page or read on
// its own.
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

// dataRow is an output row: the user's fields, padded to the widest
// record, then the verdict (blank when there is none: no address, or
// none written yet).
func (j *rowsJoin) dataRow(fields []string, r *evs.Result, line, dupOf string) []string {
	out := j.userFields(fields)
	if r == nil {
		for range len(verdictColumns) - 2 {
			out = append(out, "")
		}
		return append(out, line, dupOf)
	}
	return append(appendVerdict(out, r.Decision), line, dupOf)
}

// appendVerdict appends a decision's CSV cells after the address, as
// csvHeader names them, to row (reused from row to row: a million rows
// make no garbage of slices).
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

// putRows stores the rows of list, if it kept them, as batch b's,
// charged to held first: their size is known, and S3 signs the file it
// is given, which must stay seekable. Rows stopped midway are removed.
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
// after all: an empty put replaces them. A failure is logged; what is
// left expires with the batch it was for.
func (h *Handler) dropRows(ctx context.Context, b evs.Batch, list *addressList) {
	rs, ok := h.d.Batches.(RowStore)
	if !ok || list.rows == nil {
		return
	}
	if err := rs.PutRows(context.WithoutCancel(ctx), b.AccountID, b.ID, b.ExpiresAt, strings.NewReader(""), 0); err != nil {
		h.d.Logger.WarnContext(ctx, "could not remove the rows of a batch not created", "batchId", b.ID, "error", err.Error())
	}
}
