package api

import (
	"bufio"
	"bytes"
	"cmp"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ReadListCSV reads the address column of every record of an RFC 4180
// file and calls add with it, trimmed of spaces, in order; an error from
// add stops the read and is returned.
//
// The layout is found unless lay says it. The delimiter is the one of
// comma, semicolon, tab and pipe that splits the first records alike
// (sniffDelimiter). The first non-blank record is a header when none of
// its fields holds an "@"; the address column is then the one named like
// an email address (emailHeaders), else the first holding an "@" in the
// next record. A column named in lay is a header's name or a 1-based
// number. Records whose address column is blank are skipped.
//
// Records end at LF, CRLF or a lone CR. The text must be UTF-8 (a BOM is
// skipped); UTF-16, a NUL or invalid byte, or a quote never closed or
// running over line breaks into text is a *listError naming the line.
// Other quotes RFC 4180 does not allow are read as spreadsheets do, but an
// address field so made keeps its quotes (`"a@x.example"junk` is
// invalid_syntax). A header naming no address column above a record with
// no "@", or a column number past every record's end, is a *listError.
//
// row, when set, is then called with every non-blank record, header
// included, in order: what a batch keeps to give the user's file back
// with its verdicts, written alike (the shape returned). Memory stays that
// of one record.
func ReadListCSV(r io.Reader, lim ListLimits, lay CSVLayout, add func(addr string) error, row func(CSVRecord) error) (CSVShape, error) {
	maxRecord := cmp.Or(max(lim.MaxRecordBytes, 0), defaultMaxRecordBytes)
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(3)
	var shape CSVShape
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		br.Discard(3)
		shape.BOM = true
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		return shape, listErrorf("The CSV file is UTF-16 (Excel's \"Unicode text\"); save it as \"CSV UTF-8\".")
	}
	br = bufio.NewReaderSize(newUTF8Reader(br, "CSV file"), 64<<10)

	s := csvScanner{lim: lim, maxRecord: maxRecord, add: add, row: row, line: 1, fieldStart: true, delim: lay.Delimiter, col: -1, numbered: -1}
	if s.delim == 0 {
		start, err := br.Peek(sniffBytes)
		s.delim = sniffDelimiter(start, err != nil)
	}
	if lay.Column != "" {
		if n, err := strconv.Atoi(lay.Column); err == nil && n >= 1 {
			s.col, s.numbered = n-1, n-1
		} else {
			s.named = lay.Column
		}
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if perr := s.scan(chunk); perr != nil {
				return s.shape(shape), perr
			}
		}
		switch err {
		case nil, bufio.ErrBufferFull:
			continue
		case io.EOF:
			return s.shape(shape), s.end() // end changes neither delimiter nor line ends
		default:
			return s.shape(shape), err
		}
	}
}

// CSVRecord is one record of a CSV list as ReadListCSV hands it on.
type CSVRecord struct {
	Line int // where the record starts, from 1
	// Fields are the record's fields as read (quotes undone), valid until
	// the callback returns.
	Fields     [][]byte
	Header     bool
	HasAddress bool // the record's address was handed to add just before
}

// maxRowFields bounds the fields of one record ReadListCSV keeps:
// Excel's widest sheet.
const maxRowFields = 16384

// CSVShape is how a CSV file was written, beyond its records.
type CSVShape struct {
	Delimiter byte
	BOM       bool // it starts with a UTF-8 byte-order mark (Excel's "CSV UTF-8")
	CRLF      bool // its first record ends with CR LF
}

func (s *csvScanner) shape(sh CSVShape) CSVShape {
	sh.Delimiter, sh.CRLF = s.delim, s.crlf
	return sh
}

// CSVLayout is what a client says of its CSV list's layout; the zero value
// finds both (see ReadListCSV).
type CSVLayout struct {
	Column    string // a header's name, in any case, or a 1-based number
	Delimiter byte   // ',', ';', '\t' or '|'
}

// ParseDelimiter reads a delimiter as a client names it: the character
// itself or its name ("comma", "semicolon", "tab", "pipe").
func ParseDelimiter(s string) (byte, bool) {
	d, ok := delimiters[strings.ToLower(s)]
	return d, ok
}

var delimiters = map[string]byte{",": ',', "comma": ',', ";": ';', "semicolon": ';', "\t": '\t', "tab": '\t', "|": '|', "pipe": '|'}

const sniffBytes = 32 << 10

// sniffDelimiter picks the delimiter of a file that starts with b (all of
// it when whole): the one that splits the first ten records into the same
// number of fields, the most where several do; else the one the first
// record holds most of; else a comma. Counting over several records tells
// Excel's semicolons from commas in names ("Smith, Bob;bob@x.example").
func sniffDelimiter(b []byte, whole bool) byte {
	cands := [...]byte{',', ';', '\t', '|'}
	var counts [][len(cands)]int
	var cur [len(cands)]int
	inQuotes, blank := false, true
	for _, c := range b {
		switch {
		case c == '"':
			inQuotes = !inQuotes
			blank = false
		case inQuotes:
		case c == '\n' || c == '\r':
			if !blank {
				counts = append(counts, cur)
			}
			cur, blank = [len(cands)]int{}, true
		default:
			blank = false
			for k, d := range cands {
				if c == d {
					cur[k]++
				}
			}
		}
		if len(counts) == 10 {
			break
		}
	}
	if whole && !blank && len(counts) < 10 {
		counts = append(counts, cur) // the last record, without a line break
	}
	if len(counts) == 0 {
		return ','
	}
	best, bestN := byte(','), 0
	for k, d := range cands {
		n := counts[0][k]
		if n > bestN && !slices.ContainsFunc(counts[1:], func(rec [len(cands)]int) bool { return rec[k] != n }) {
			best, bestN = d, n
		}
	}
	if bestN > 0 {
		return best
	}
	for k, d := range cands {
		if counts[0][k] > bestN {
			best, bestN = d, counts[0][k]
		}
	}
	return best
}

// emailHeaders are header names of an address column, as headerKey writes
// them, in several languages. addressHeaders count only where no column
// is named like an email: "address" is as often a postal one.
var (
	emailHeaders = []string{"email", "emails", "emailaddress", "emailaddresses", "mail", "mailaddress",
		"courriel", "adressecourriel", "adresseemail", "adressemail", "adresseelectronique",
		"correo", "correoelectronico", "correoelectrónico", "direcciondecorreo", "direccióndecorreo",
		"enderecodeemail", "endereçodeemail", "emailadresse", "mailadresse", "epost", "epostadresse",
		"indirizzoemail", "postaelettronica", "emailadres", "sahkoposti", "sähköposti"}
	addressHeaders = []string{"address", "adresse", "direccion", "dirección", "endereco", "endereço", "indirizzo", "adres"}
)

func headerKey(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headerColumn is the address column of a header row: the one the client
// named, else the first named like an email, else like an address; -1
// when none is.
func headerColumn(cells []csvCell, named string) (int, error) {
	if named != "" {
		for _, c := range cells {
			if strings.EqualFold(strings.TrimSpace(string(c.b)), strings.TrimSpace(named)) {
				return c.field, nil
			}
		}
		names := make([]string, 0, min(len(cells), 10))
		for _, c := range cells[:min(len(cells), 10)] {
			names = append(names, strconv.Quote(strings.TrimSpace(string(c.b))))
		}
		return -1, listErrorf("The CSV header has no column %q; its columns are %s.", named, strings.Join(names, ", "))
	}
	for _, set := range [][]string{emailHeaders, addressHeaders} {
		for _, c := range cells {
			if slices.Contains(set, headerKey(string(c.b))) {
				return c.field, nil
			}
		}
	}
	return -1, nil
}

// csvCell is a field of a record as the scanner keeps it (keep).
type csvCell struct {
	field int
	b     []byte
}

const (
	maxCells   = 1000 // non-blank fields kept of a record before the address column is known
	trimMargin = 256  // bytes past MaxAddressBytes kept of an address field, for spaces the trim removes
)

// csvScanner is the state of a CSV read between chunks of input.
type csvScanner struct {
	lim       ListLimits
	maxRecord int
	add       func(string) error
	delim     byte
	// row, when set, is handed every record whole (ReadListCSV), of
	// fields[:nf].
	row     func(CSVRecord) error
	fields  [][]byte
	nf      int
	hasAddr bool
	header  bool
	// col is the address column, -1 until known; the client named it
	// named or numbered (from 0, else -1). headerCells are the names of a
	// header row that named none, for the error.
	col         int
	named       string
	numbered    int
	headerCells []string
	crlf        bool // the first line break was CR LF
	breaks      int
	widest      int       // the most fields a record had
	requoted    bool      // the address field's closing quote was followed by text (requote)
	cells       []csvCell // the record's fields so far (keep): its address field alone once col is known

	line        int  // line of the byte being scanned, from 1
	recordLine  int  // line the current record started on
	recordBytes int  // bytes of the current record so far
	field       int  // index of the current field in its record
	fieldStart  bool // nothing of the current field read yet
	quoteLine   int  // line the current quoted field opened on
	inQuotes    bool // inside the quotes of a quoted field
	quoteSeen   bool // inQuotes, and the last byte was a quote: closing or doubled
	closed      bool // the quoted field's closing quote was read
	pendingCR   bool // the last byte was a CR outside quotes
	sawRecord   bool // a record with a non-blank first field was seen
	addresses   int
	hasContents bool // the current record has any byte
}

func (s *csvScanner) scan(chunk []byte) error {
	for _, c := range chunk {
		if c == 0 {
			return listErrorf("The CSV file holds a NUL byte (line %d): is it UTF-16? Save it as \"CSV UTF-8\".", s.line)
		}
		if s.pendingCR { // the record ended at the CR, alone or before an LF
			s.pendingCR = false
			s.line++
			if s.breaks++; s.breaks == 1 {
				s.crlf = c == '\n'
			}
			if c == '\n' {
				continue
			}
		}
		if err := s.byte(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *csvScanner) byte(c byte) error {
	if !s.hasContents {
		s.hasContents = true
		s.recordLine = s.line
	}
	s.recordBytes++
	if s.recordBytes > s.maxRecord {
		return listErrorf("The CSV record at line %d is longer than %d bytes.", s.recordLine, s.maxRecord)
	}
	switch {
	case s.inQuotes && s.quoteSeen && c != '"':
		s.inQuotes, s.quoteSeen, s.closed = false, false, true // the previous quote closed the field
		return s.unquoted(c)
	case !s.inQuotes:
		return s.unquoted(c)
	case c == '"' && !s.quoteSeen:
		s.quoteSeen = true
		return nil
	}
	s.quoteSeen = false // after a quote, a quote: one literal quote
	if c == '\n' {
		s.line++
	}
	s.keep(c)
	return nil
}

func (s *csvScanner) unquoted(c byte) error {
	switch c {
	case s.delim:
		s.field++
		s.fieldStart, s.closed, s.requoted = true, false, false
		return nil
	case '\n':
		s.line++
		s.breaks++
		return s.endRecord()
	case '\r':
		s.pendingCR = true
		return s.endRecord()
	}
	// Stray quotes within one line are read as spreadsheets do (requote);
	// a quoted field that ran over line breaks before its text has
	// swallowed rows.
	if s.closed && s.quoteLine != s.line {
		return listErrorf("The CSV file is malformed at line %d: a quote opened there closes at line %d and is followed by text.", s.quoteLine, s.line)
	}
	if s.closed && !s.requoted {
		s.requote()
	}
	if c == '"' && s.fieldStart {
		s.fieldStart, s.inQuotes, s.quoteLine = false, true, s.line
		return nil
	}
	s.fieldStart = false // a quote inside a field that does not start with one is text
	s.keep(c)
	return nil
}

// keep appends c to the record's cell of its field, up to one byte past
// the limit: every field's while the address column is not known, then
// the address field's alone.
func (s *csvScanner) keep(c byte) {
	if s.row != nil && s.field < maxRowFields {
		s.growFields()
		s.fields[s.field] = append(s.fields[s.field], c)
	}
	if s.col >= 0 && s.field != s.col {
		return
	}
	n := len(s.cells)
	switch {
	case n > 0 && s.cells[n-1].field == s.field:
		if len(s.cells[n-1].b) <= s.lim.MaxAddressBytes+trimMargin {
			s.cells[n-1].b = append(s.cells[n-1].b, c)
		}
	case n < maxCells:
		// A cell's bytes are reused from record to record.
		s.cells = slices.Grow(s.cells, 1)[:n+1]
		s.cells[n] = csvCell{field: s.field, b: append(s.cells[n].b[:0], c)}
	}
}

// requote puts back the quotes of the current field where text follows
// its closing quote, so `"a@x.example"junk` is an invalid address, never
// the valid a@x.examplejunk. The user's own fields (rows) are not requoted.
func (s *csvScanner) requote() {
	s.requoted = true
	switch n := len(s.cells); {
	case n > 0 && s.cells[n-1].field == s.field:
		s.cells[n-1].b = append(append([]byte{'"'}, bytes.ReplaceAll(s.cells[n-1].b, []byte{'"'}, []byte(`""`))...), '"')
	case s.field == s.col: // the known address field, quoted empty
		s.cells = append(s.cells, csvCell{field: s.field, b: []byte(`""`)})
	}
}

func (s *csvScanner) growFields() {
	for len(s.fields) <= s.field {
		s.fields = append(s.fields, nil)
	}
	for ; s.nf <= s.field; s.nf++ {
		s.fields[s.nf] = s.fields[s.nf][:0]
	}
}

// endRecord hands the finished record's address on, then the record
// itself when rows are kept.
func (s *csvScanner) endRecord() error {
	defer s.reset()
	s.widest = max(s.widest, s.field+1)
	s.hasAddr, s.header = false, false
	if err := s.endAddress(); err != nil || s.row == nil {
		return err
	}
	if s.field >= maxRowFields {
		return listErrorf("The CSV record at line %d has more than %d columns.", s.recordLine, maxRowFields)
	}
	s.growFields()
	if !slices.ContainsFunc(s.fields[:s.nf], nonBlank) {
		return nil
	}
	return s.row(CSVRecord{Line: s.recordLine, Fields: s.fields[:s.nf], Header: s.header, HasAddress: s.hasAddr})
}

func (s *csvScanner) endAddress() error {
	if s.col < 0 {
		if known, err := s.findColumn(); !known || err != nil {
			return err
		}
	}
	var cell []byte // the address field's; once col is known, the one cell kept
	if i := slices.IndexFunc(s.cells, func(c csvCell) bool { return c.field == s.col }); i >= 0 {
		cell = s.cells[i].b
	}
	if len(cell) > s.lim.MaxAddressBytes+trimMargin {
		return listErrorf("Address %d (line %d) is longer than %d bytes.", s.addresses+1, s.recordLine, s.lim.MaxAddressBytes)
	}
	addr := string(bytes.TrimSpace(cell))
	if addr == "" {
		return nil
	}
	if !s.sawRecord {
		s.sawRecord = true
		if !strings.Contains(addr, "@") {
			s.header = true
			return nil // header row
		}
	}
	return s.address(addr)
}

// findColumn reads a record while the address column is not known: a
// header names it, or the record's first field holding an "@" is it (else
// the first field). known tells whether the record's address is to be read.
func (s *csvScanner) findColumn() (known bool, err error) {
	hasAt := func(c csvCell) bool { return bytes.ContainsRune(c.b, '@') }
	if !slices.ContainsFunc(s.cells, func(c csvCell) bool { return nonBlank(c.b) }) {
		return false, nil
	}
	if !s.sawRecord {
		s.sawRecord = true
		if !slices.ContainsFunc(s.cells, hasAt) {
			s.header = true
			col, err := headerColumn(s.cells, s.named)
			s.col = col
			if col < 0 {
				for _, c := range s.cells[:min(len(s.cells), 10)] {
					s.headerCells = append(s.headerCells, strconv.Quote(strings.TrimSpace(string(c.b))))
				}
			}
			return false, err
		}
		if s.named != "" {
			return false, listErrorf("The CSV file has no header row (its first row holds an address), so there is no column %q; name the column by its number.", s.named)
		}
	}
	if s.headerCells != nil && !slices.ContainsFunc(s.cells, hasAt) {
		// Reading the first column would make every row invalid_syntax.
		return false, listErrorf("No column of the CSV file holds addresses: its header's columns are %s, and its first row (line %d) has no \"@\". "+
			"Name the address column with column= (its header or number; ?column= on a CSV body).", strings.Join(s.headerCells, ", "), s.recordLine)
	}
	s.col = 0
	if i := slices.IndexFunc(s.cells, hasAt); i >= 0 {
		s.col = s.cells[i].field
	}
	return true, nil
}

func nonBlank(f []byte) bool { return len(bytes.TrimSpace(f)) != 0 }

func (s *csvScanner) address(addr string) error {
	if len(addr) > s.lim.MaxAddressBytes {
		return listErrorf("Address %d (line %d) is longer than %d bytes.", s.addresses+1, s.recordLine, s.lim.MaxAddressBytes)
	}
	if s.addresses == s.lim.MaxAddresses {
		return tooMany(s.lim.MaxAddresses)
	}
	s.addresses++
	s.hasAddr = true
	return s.add(addr)
}

func (s *csvScanner) reset() {
	s.cells = s.cells[:0]
	s.field, s.recordBytes, s.nf = 0, 0, 0
	s.fieldStart, s.inQuotes, s.quoteSeen, s.closed, s.requoted = true, false, false, false, false
	s.hasContents = false
}

func (s *csvScanner) end() error {
	if s.inQuotes && !s.quoteSeen {
		return listErrorf("The CSV file is malformed at line %d: a quote opened there is never closed.", s.quoteLine)
	}
	if s.hasContents {
		if err := s.endRecord(); err != nil {
			return err
		}
	}
	if s.numbered >= 0 && s.addresses == 0 && s.widest <= s.numbered {
		return listErrorf("The CSV file has no column %d: its widest row has %d. Name the address column by its header or a number from 1 to %d.",
			s.numbered+1, s.widest, max(s.widest, 1))
	}
	return nil
}

func tooMany(n int) *listError {
	return &listError{msg: "The list holds more than " + strconv.Itoa(n) + " addresses.", TooMany: true}
}
