package api

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
)

// ReadListCSV reads the first field of every record of an RFC 4180 file and calls
// add with it, trimmed of spaces, in order. Blank first fields are skipped,
// and so is the first record with a non-blank first field when that field
// has no "@": a header row. An error from add stops the read and is
// returned.
//
// Only the first field is kept: later fields are scanned for their quotes
// (a quoted field may hold commas and line breaks) and dropped. Records end
// at LF, CRLF, or a lone CR (files saved with old Mac line endings). The
// text must be UTF-8 (a UTF-8 byte-order mark is skipped); a UTF-16 file
// (Excel's "Unicode text"), a NUL byte or an invalid byte is a *listError
// saying so, as are quotes that RFC 4180 does not allow.
func ReadListCSV(r io.Reader, lim ListLimits, add func(addr string) error) error {
	maxRecord := lim.MaxRecordBytes
	if maxRecord <= 0 {
		maxRecord = defaultMaxRecordBytes
	}
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(3)
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		br.Discard(3)
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		return listErrorf("The CSV file is UTF-16 (Excel's \"Unicode text\"); save it as \"CSV UTF-8\".")
	}
	br = bufio.NewReaderSize(newUTF8Reader(br, "CSV file"), 64<<10)

	s := csvScanner{lim: lim, maxRecord: maxRecord, add: add, line: 1, fieldStart: true}
	s.first = make([]byte, 0, 64)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if perr := s.scan(chunk); perr != nil {
				return perr
			}
		}
		switch err {
		case nil, bufio.ErrBufferFull:
			continue
		case io.EOF:
			return s.end()
		default:
			return err
		}
	}
}

// trimMargin is how many bytes past MaxAddressBytes a first field is kept
// before it is too long: room for spaces the trim removes.
const trimMargin = 256

// csvScanner is the state of a CSV read between chunks of input.
type csvScanner struct {
	lim       ListLimits
	maxRecord int
	add       func(string) error

	line        int    // line of the byte being scanned, from 1
	recordLine  int    // line the current record started on
	recordBytes int    // bytes of the current record so far
	field       int    // index of the current field in its record
	fieldStart  bool   // nothing of the current field read yet
	quoted      bool   // the current field started with a quote
	inQuotes    bool   // inside the quotes of a quoted field
	quoteSeen   bool   // inQuotes, and the last byte was a quote: closing or doubled
	closed      bool   // the quoted field's closing quote was read
	pendingCR   bool   // the last byte was a CR outside quotes
	first       []byte // the first field so far, reused from record to record
	firstLong   bool   // the first field is longer than MaxAddressBytes
	sawRecord   bool   // a record with a non-blank first field was seen
	addresses   int
	hasContents bool // the current record has any byte
}

func (s *csvScanner) scan(chunk []byte) error {
	for _, c := range chunk {
		if c == 0 {
			return listErrorf("The CSV file holds a NUL byte (line %d): is it UTF-16? Save it as \"CSV UTF-8\".", s.line)
		}
		if s.pendingCR {
			s.pendingCR = false
			if c == '\n' {
				// CRLF: the record ended at the CR.
				s.line++
				continue
			}
			s.line++ // a lone CR ended the line
		}
		if err := s.byte(c); err != nil {
			return err
		}
	}
	return nil
}

// byte advances the scanner by one byte.
func (s *csvScanner) byte(c byte) error {
	if !s.hasContents {
		s.hasContents = true
		s.recordLine = s.line
	}
	s.recordBytes++
	if s.recordBytes > s.maxRecord {
		return listErrorf("The CSV record at line %d is longer than %d bytes.", s.recordLine, s.maxRecord)
	}
	if s.inQuotes {
		if s.quoteSeen {
			s.quoteSeen = false
			if c == '"' { // a doubled quote: one literal quote
				s.keep(c)
				return nil
			}
			// The previous quote closed the field.
			s.inQuotes, s.closed = false, true
			return s.unquoted(c)
		}
		if c == '"' {
			s.quoteSeen = true
			return nil
		}
		if c == '\n' {
			s.line++
		}
		s.keep(c)
		return nil
	}
	return s.unquoted(c)
}

// unquoted handles a byte outside quotes.
func (s *csvScanner) unquoted(c byte) error {
	switch c {
	case ',':
		s.field++
		s.fieldStart, s.quoted, s.closed = true, false, false
		return nil
	case '\n':
		s.line++
		return s.endRecord()
	case '\r':
		s.pendingCR = true
		return s.endRecord()
	}
	if s.closed {
		return listErrorf("The CSV file is malformed at line %d: a quoted field is followed by text.", s.line)
	}
	if c == '"' {
		if !s.fieldStart {
			return listErrorf("The CSV file is malformed at line %d: a quote inside a field that does not start with one.", s.line)
		}
		s.fieldStart, s.quoted, s.inQuotes = false, true, true
		return nil
	}
	s.fieldStart = false
	s.keep(c)
	return nil
}

// keep appends c to the first field, up to one byte past the limit.
func (s *csvScanner) keep(c byte) {
	if s.field != 0 || s.firstLong {
		return
	}
	if len(s.first) >= s.lim.MaxAddressBytes+trimMargin {
		// Spaces around the address are trimmed later; beyond this margin
		// the field is too long for any plausible trimming.
		s.firstLong = true
		return
	}
	s.first = append(s.first, c)
}

// endRecord hands the finished record's first field on.
func (s *csvScanner) endRecord() error {
	defer s.reset()
	if s.firstLong {
		return listErrorf("Address %d (line %d) is longer than %d bytes.", s.addresses+1, s.recordLine, s.lim.MaxAddressBytes)
	}
	// One allocation of the address's own length: a strings.Builder
	// started over for every record grew through several buffers for
	// each, which a million-address upload paid for hundreds of MB.
	addr := string(bytes.TrimSpace(s.first))
	if addr == "" {
		return nil
	}
	if !s.sawRecord {
		s.sawRecord = true
		if !strings.Contains(addr, "@") {
			return nil // header row
		}
	}
	if len(addr) > s.lim.MaxAddressBytes {
		return listErrorf("Address %d (line %d) is longer than %d bytes.", s.addresses+1, s.recordLine, s.lim.MaxAddressBytes)
	}
	if s.addresses == s.lim.MaxAddresses {
		return &listError{msg: tooMany(s.lim.MaxAddresses), TooMany: true}
	}
	s.addresses++
	return s.add(addr)
}

func (s *csvScanner) reset() {
	s.first = s.first[:0]
	s.field, s.recordBytes = 0, 0
	s.fieldStart, s.quoted, s.inQuotes, s.quoteSeen, s.closed = true, false, false, false, false
	s.firstLong, s.hasContents = false, false
}

// end finishes the input: a last record without a line break counts, an
// open quote is an error.
func (s *csvScanner) end() error {
	if s.inQuotes && !s.quoteSeen {
		return listErrorf("The CSV file is malformed at line %d: a quoted field is never closed.", s.recordLine)
	}
	if s.hasContents {
		return s.endRecord()
	}
	return nil
}

func tooMany(n int) string {
	return "The list holds more than " + strconv.Itoa(n) + " addresses."
}
