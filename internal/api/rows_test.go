package api

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/evs"
)

// csvRowsOf reads in with ReadListCSV and returns its addresses and
// its records, each as "line:h|a|-:field|field".
func csvRowsOf(in string, lay CSVLayout) ([]string, []string, error) {
	var addrs, recs []string
	_, err := ReadListCSV(strings.NewReader(in), ListLimits{MaxAddresses: 100, MaxAddressBytes: 100}, lay,
		func(a string) error { addrs = append(addrs, a); return nil },
		func(r CSVRecord) error {
			kind := "-"
			switch {
			case r.Header:
				kind = "h"
			case r.HasAddress:
				kind = "a"
			}
			fields := make([]string, len(r.Fields))
			for i, f := range r.Fields {
				fields[i] = string(f)
			}
			recs = append(recs, fmt.Sprintf("%d:%s:%s", r.Line, kind, strings.Join(fields, "|")))
			return nil
		})
	return addrs, recs, err
}

func TestListCSVRows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		lay   CSVLayout
		addrs []string
		recs  []string
	}{
		{"header and rows", "name;email\nAnn;a@x.example\nBob;b@x.example\n", CSVLayout{},
			[]string{"a@x.example", "b@x.example"}, []string{"1:h:name|email", "2:a:Ann|a@x.example", "3:a:Bob|b@x.example"}},
		{"no header", "a@x.example,1\n", CSVLayout{}, []string{"a@x.example"}, []string{"1:a:a@x.example|1"}},
		{"a row without its address is kept", "email,n\n,1\na@x.example,2\n", CSVLayout{},
			[]string{"a@x.example"}, []string{"1:h:email|n", "2:-:|1", "3:a:a@x.example|2"}},
		{"blank rows are not rows", "email\n\n,\n  \na@x.example\n", CSVLayout{}, []string{"a@x.example"}, []string{"1:h:email", "5:a:a@x.example"}},
		{"ragged rows as they are", "email,a,b\na@x.example\nb@x.example,1,2,3,\n", CSVLayout{},
			[]string{"a@x.example", "b@x.example"}, []string{"1:h:email|a|b", "2:a:a@x.example", "3:a:b@x.example|1|2|3|"}},
		{"a record's line is where it starts", "n,email\n\"two\nlines\",a@x.example\nx,b@x.example\n", CSVLayout{},
			[]string{"a@x.example", "b@x.example"}, []string{"1:h:n|email", "2:a:two\nlines|a@x.example", "4:a:x|b@x.example"}},
		{"quotes undone, stray quotes kept", "\"a,\"\"b\",c\"d@x.example\n", CSVLayout{},
			[]string{"c\"d@x.example"}, []string{"1:a:a,\"b|c\"d@x.example"}},
		{"named column", "work\thome\nw@x.example\th@x.example\n", CSVLayout{Column: "home", Delimiter: '\t'},
			[]string{"h@x.example"}, []string{"1:h:work|home", "2:a:w@x.example|h@x.example"}},
		{"numbered column and its header", "a,b\n1,x@x.example\n", CSVLayout{Column: "2"},
			[]string{"x@x.example"}, []string{"1:h:a|b", "2:a:1|x@x.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, recs, err := csvRowsOf(tc.in, tc.lay)
			if err != nil || !slices.Equal(addrs, tc.addrs) || !slices.Equal(recs, tc.recs) {
				t.Fatalf("got %q %q %v, want %q %q", addrs, recs, err, tc.addrs, tc.recs)
			}
		})
	}
	if _, _, err := csvRowsOf("a@x.example"+strings.Repeat(",", maxRowFields)+"\n", CSVLayout{}); err == nil || !strings.Contains(err.Error(), "columns") {
		t.Fatalf("a row past %d columns: %v", maxRowFields, err)
	}
}

// FuzzListCSVRows: keeping the rows changes nothing of what the list
// holds (the same addresses, the same error), and the rows are the
// records encoding/csv reads, blank ones aside, where it reads the file.
func FuzzListCSVRows(f *testing.F) {
	for _, s := range []string{"a@x\nb@y\n", "email,x\n\"a@x\",\"b\nc\"\n", "n;email\n1;a@x\n", ",\n\nname\n", "a\"b\n", "x,y\n,\n"} {
		f.Add(s)
	}
	l := ListLimits{MaxAddresses: 1 << 20, MaxAddressBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, in string) {
		want, werr := csvAddresses(in, l)
		var got []string
		var recs [][]string
		_, err := ReadListCSV(strings.NewReader(in), l, CSVLayout{}, func(a string) error { got = append(got, a); return nil },
			func(r CSVRecord) error {
				rec := make([]string, len(r.Fields))
				for i, f := range r.Fields {
					rec[i] = string(f)
				}
				recs = append(recs, rec)
				return nil
			})
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() || err == nil && !slices.Equal(got, want) {
			t.Fatalf("with rows %q %v, without %q %v", got, err, want, werr)
		}
		if err != nil || !utf8.ValidString(in) || strings.ContainsAny(in, "\x00\r") || strings.HasPrefix(in, "\ufeff") {
			return
		}
		r := csv.NewReader(strings.NewReader(in))
		r.FieldsPerRecord = -1
		r.Comma = rune(sniffDelimiter([]byte(in)[:min(len(in), sniffBytes)], len(in) <= sniffBytes))
		var std [][]string
		for {
			rec, cerr := r.Read()
			if cerr == io.EOF {
				break
			}
			if cerr != nil {
				return // encoding/csv refuses it
			}
			blank := true
			for _, f := range rec {
				blank = blank && strings.TrimSpace(f) == ""
			}
			if !blank {
				std = append(std, rec)
			}
		}
		if !slices.EqualFunc(recs, std, slices.Equal) {
			t.Fatalf("rows %q, encoding/csv %q", recs, std)
		}
	})
}

// memRows is a RowStore in memory.
type memRows map[string][]byte

func (m memRows) PutRows(_ context.Context, account, batch string, _ time.Time, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil || int64(len(b)) != size {
		return fmt.Errorf("put %d of %d bytes: %v", len(b), size, err)
	}
	m[account+"/"+batch] = b
	return nil
}

func (m memRows) OpenRows(_ context.Context, account, batch string) (io.ReadCloser, bool, error) {
	b, ok := m[account+"/"+batch]
	return io.NopCloser(bytes.NewReader(b)), ok, nil
}

// fakeResults serves results of the seqs it holds, counting its reads.
type fakeResults struct {
	memRows
	results []evs.Result
	reads   int
}

func (f *fakeResults) Results(_ context.Context, _, _ string, after, limit int, status evs.Status) ([]evs.Result, error) {
	f.reads++
	var out []evs.Result
	for _, r := range f.results {
		if r.Seq > after && (status == "" || r.Status() == status) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// TestRowsJoin writes a list's rows as a batch keeps them and joins them
// to results: every row in order, each with its address's verdict, a
// repeat with the first's and the line of it, a row with no address or
// no result yet blank, across pages of results.
func TestRowsJoin(t *testing.T) {
	var in strings.Builder
	in.WriteString("name,email,extra\n")
	const n = 2500
	for i := range n {
		switch {
		case i == 7:
			in.WriteString("nobody,,\n")
		case i%100 == 50:
			fmt.Fprintf(&in, "again %d,a%d@X.EXAMPLE\n", i, i-50) // a repeat of row i-50
		default:
			fmt.Fprintf(&in, "=n%d,a%d@x.example,\"e,%d\",wide\n", i, i, i)
		}
	}
	list := &addressList{}
	sp, delim, err := readRows(strings.NewReader(in.String()), ListLimits{MaxAddresses: n, MaxAddressBytes: 100}, CSVLayout{}, list, true)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	list.rows = sp
	st := &fakeResults{memRows: memRows{}}
	r, size, err := sp.finish(delim)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutRows(context.Background(), "acct", "b1", time.Time{}, r, size); err != nil {
		t.Fatal(err)
	}
	// Results for every distinct address but the last ten (not written yet).
	for _, it := range list.items[:len(list.items)-10] {
		reason := evs.Reason("accepted_email")
		if it.Seq%3 == 0 {
			reason = "rejected_email"
		}
		st.results = append(st.results, evs.Result{Seq: it.Seq, Email: it.Email, Decision: evs.Decision{Reason: reason}})
	}
	rows := newCSVRows(st, "acct", "b1", filter{})
	defer rows.close()
	var out bytes.Buffer
	if _, err := rows.writeUpTo(context.Background(), &out, -1); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]string{"name", "email", "extra", ""}, verdictColumns...); !slices.Equal(recs[0], want) {
		t.Fatalf("header %q, want %q", recs[0], want)
	}
	if len(recs) != n+1 {
		t.Fatalf("%d rows, want %d", len(recs)-1, n)
	}
	seqOf := map[string]int{}
	for _, it := range list.items {
		seqOf[it.Email] = it.Seq
	}
	byLine := map[string][]string{}
	for i, rec := range recs[1:] {
		line := fmt.Sprint(i + 2)
		v := rec[4:]
		switch {
		case v[9] != line: // evs_line
			t.Fatalf("row %d: line %q, want %s: %q", i, rec[13], line, rec)
		case i == 7:
			if rec[0] != "nobody" || strings.Join(v[:9], "") != "" {
				t.Fatalf("row without an address: %q", rec)
			}
		case i%100 == 50:
			first := byLine[fmt.Sprint(i-50+2)]
			if v[10] != fmt.Sprint(i-50+2) || !slices.Equal(v[:9], first[:9]) {
				t.Fatalf("repeat %d: %q, first %q", i, v, first)
			}
		default:
			seq := seqOf[fmt.Sprintf("a%d@x.example", i)]
			want := "accepted_email"
			switch {
			case seq >= len(list.items)-10:
				want = ""
			case seq%3 == 0:
				want = "rejected_email"
			}
			if rec[0] != fmt.Sprintf("'=n%d", i) || rec[2] != fmt.Sprintf("e,%d", i) || rec[3] != "wide" || v[1] != want || v[10] != "" {
				t.Fatalf("row %d: %q, want reason %q", i, rec, want)
			}
		}
		byLine[line] = v
	}
	// One pass of the results, a read per repeat at most.
	if max := len(st.results)/MaxPageLimit + 1 + n/100; st.reads > max {
		t.Errorf("%d reads of results, want at most %d", st.reads, max)
	}

	// A filter keeps the rows whose verdict passes.
	f, err := parseFilter(map[string]string{"status": "undeliverable"})
	if err != nil {
		t.Fatal(err)
	}
	rows = newCSVRows(st, "acct", "b1", f)
	defer rows.close()
	out.Reset()
	if _, err := rows.writeUpTo(context.Background(), &out, -1); err != nil {
		t.Fatal(err)
	}
	recs, _ = csv.NewReader(&out).ReadAll()
	for _, rec := range recs[1:] {
		if rec[5] != "rejected_email" {
			t.Fatalf("status=undeliverable kept %q", rec)
		}
	}
	if len(recs) < 2 {
		t.Fatal("status=undeliverable kept nothing")
	}
}

// TestRowsMetaRefused: a rows file that is not one is an error, not an
// empty export.
func TestRowsMetaRefused(t *testing.T) {
	st := memRows{"a/b": []byte(strings.Repeat("x", rowsMetaBytes) + "\n")}
	if _, err := openRowsJoin(context.Background(), st, "a", "b"); err == nil {
		t.Fatal("a rows file without its first line was read")
	}
	st["a/c"] = []byte("short")
	if _, err := openRowsJoin(context.Background(), st, "a", "c"); err == nil {
		t.Fatal("a short rows file was read")
	}
}

// TestRowSpoolLeavesNoFile: the spool is unlinked as soon as it is made,
// so a process killed while it reads a list leaves nothing in TMPDIR; its
// rows are still read back whole.
func TestRowSpoolLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	list := &addressList{}
	sp, delim, err := readRows(strings.NewReader("email\na@x.example\n"), listLim, CSVLayout{}, list, true)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the spool left %v in TMPDIR", left)
	}
	r, _, err := sp.finish(delim)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil || !bytes.Contains(b, []byte("a@x.example")) || !bytes.HasPrefix(b, []byte(rowsMagic)) {
		t.Fatalf("the spool reads back %q, %v", b, err)
	}
}
