package api

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var listLim = ListLimits{MaxAddresses: 5, MaxAddressBytes: 40}

func csvAddresses(in string, l ListLimits) ([]string, error) {
	return csvLaidOut(in, l, CSVLayout{})
}

func csvLaidOut(in string, l ListLimits, lay CSVLayout) ([]string, error) {
	var got []string
	_, err := ReadListCSV(strings.NewReader(in), l, lay, func(a string) error { got = append(got, a); return nil }, nil)
	return got, err
}

func TestListCSV(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
		err  string // part of the error message; "" for none
	}{
		{"plain lines", "a@x.example\nb@x.example\n", []string{"a@x.example", "b@x.example"}, ""},
		{"no final newline", "a@x.example\nb@x.example", []string{"a@x.example", "b@x.example"}, ""},
		{"header skipped", "email,name\na@x.example,Ann\n", []string{"a@x.example"}, ""},
		{"header after a blank first cell", ",\nEmail\na@x.example\n", []string{"a@x.example"}, ""},
		{"only the first header", "email\nname\na@x.example\n", []string{"name", "a@x.example"}, ""},
		{"CRLF", "email\r\na@x.example\r\nb@x.example\r\n", []string{"a@x.example", "b@x.example"}, ""},
		{"CR only", "email\ra@x.example\rb@x.example\r", []string{"a@x.example", "b@x.example"}, ""},
		{"UTF-8 BOM", "\ufeffa@x.example\n", []string{"a@x.example"}, ""},
		{"spaces trimmed", "  a@x.example  ,x\n", []string{"a@x.example"}, ""},
		{"blank rows skipped", "\n\n,foo\na@x.example\n\n", []string{"a@x.example"}, ""},
		{"quoted first field", "\"a@x.example\",\"Ann, Smith\"\n", []string{"a@x.example"}, ""},
		{"quoted field with a line break later", "a@x.example,\"line\nbreak\"\nb@x.example\n", []string{"a@x.example", "b@x.example"}, ""},
		{"doubled quote", "\"a\"\"b@x.example\"\n", []string{"a\"b@x.example"}, ""},
		{"many columns", "a@x.example" + strings.Repeat(",", 100000) + "\n", []string{"a@x.example"}, ""},
		{"UTF-16 LE", "\xff\xfea\x00@\x00", nil, "UTF-16"},
		{"UTF-16 BE", "\xfe\xff\x00a\x00@", nil, "UTF-16"},
		{"NUL byte", "a@x.example\nb\x00@x.example\n", nil, "NUL byte (line 2)"},
		{"Latin-1", "a@x.example\nj\xe9r\xf4me@x.example\n", nil, "not UTF-8 text (line 2)"},
		{"bare quote kept", "a\"b@x.example\nc@x.example\n", []string{"a\"b@x.example", "c@x.example"}, ""},
		{"text after a closing quote: the address as written", "\"a@x.example\"x,y\nc@x.example\n", []string{"\"a@x.example\"x", "c@x.example"}, ""},
		{"a header that names no address column, no @ below", "Name;Firma\nHans;ACME\n", nil, `its header's columns are "Name", "Firma"`},
		{"a header of unknown names, an address below", "Name;Kontakt\nHans;hans@x.example\n", []string{"hans@x.example"}, ""},
		{"unclosed quote", "a@x.example\n\"b@x.example\n", nil, "line 2: a quote opened there is never closed"},
		{"stray quote named where it opens", "a@x.example\nb@x.example,\"x\nc@x.example\nd@x.example\ne@x.example\"z\n", nil,
			"line 2: a quote opened there closes at line 5"},
		{"address too long", "a@x.example\n" + strings.Repeat("b", 41) + "@x\n", nil, "Address 2 (line 2) is longer than 40 bytes"},
		{"huge first field", strings.Repeat("b", 1<<20) + "@x\n", nil, "longer than"},
		{"too many", "1@x\n2@x\n3@x\n4@x\n5@x\n6@x\n", nil, "more than 5 addresses"},
		{"record too long", "a@x.example," + strings.Repeat("y", 1<<20) + "\n", nil, "record at line 1 is longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := csvAddresses(tc.in, listLim)
			if tc.err != "" {
				var e *listError
				if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a *listError containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestListCSVColumns: the address column is found by its header, by the
// first "@" of a file without one, or as the client names it; the
// delimiter is sniffed or named.
func TestListCSVColumns(t *testing.T) {
	lim := ListLimits{MaxAddresses: 10, MaxAddressBytes: 40}
	for _, tc := range []struct {
		name string
		in   string
		lay  CSVLayout
		want []string
		err  string
	}{
		{"name,email export", "name,email\nBob,bob@x.example\nAnn,ann@x.example\n", CSVLayout{}, []string{"bob@x.example", "ann@x.example"}, ""},
		{"header in any case, spaces", "First Name,Last Name,E-Mail Address\nBob,Lee,bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"header in French", "nom;courriel\nBob;bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"header in Spanish", "Nombre,Correo electrónico\nBob,bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"email outranks address", "name,address,email\nBob,1 Main St,bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"address when nothing better", "name,address\nBob,bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"unknown header: the first row's @ column", "who,contact\nBob,bob@x.example\nAnn,ann@x.example\n", CSVLayout{}, []string{"bob@x.example", "ann@x.example"}, ""},
		{"no header: the first @ column", "Bob,bob@x.example\nAnn,ann@x.example\n", CSVLayout{}, []string{"bob@x.example", "ann@x.example"}, ""},
		{"no header, address first, as before", "bob@x.example,Bob\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"missing cell skipped", "name,email\nBob\nAnn,ann@x.example\n", CSVLayout{}, []string{"ann@x.example"}, ""},
		{"an invalid cell is still the address", "name,email\nBob,not-an-address\n", CSVLayout{}, []string{"not-an-address"}, ""},
		{"semicolons sniffed", "Bob;bob@x.example\nAnn;ann@x.example\n", CSVLayout{}, []string{"bob@x.example", "ann@x.example"}, ""},
		{"semicolons with commas in names", "Smith, Bob;bob@x.example\nLee, Ann;ann@x.example\nKim;kim@x.example\n", CSVLayout{}, []string{"bob@x.example", "ann@x.example", "kim@x.example"}, ""},
		{"tabs sniffed", "name\temail\nBob\tbob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"pipes sniffed", "name|email\nBob|bob@x.example\n", CSVLayout{}, []string{"bob@x.example"}, ""},
		{"quoted delimiter not counted", "\"a;b\",c@x.example\n\"d;e\",f@x.example\n", CSVLayout{}, []string{"c@x.example", "f@x.example"}, ""},
		{"named delimiter", "a@x.example;b\n", CSVLayout{Delimiter: ','}, []string{"a@x.example;b"}, ""},
		{"named column", "work,home\nbob@work.example,bob@home.example\n", CSVLayout{Column: "HOME"}, []string{"bob@home.example"}, ""},
		{"numbered column", "bob@work.example,bob@home.example\n", CSVLayout{Column: "2"}, []string{"bob@home.example"}, ""},
		{"numbered column, header skipped", "work,home\nbob@work.example,bob@home.example\n", CSVLayout{Column: "2"}, []string{"bob@home.example"}, ""},
		{"numbered column quoted empty, then text", "x,\"\"@home.example\n", CSVLayout{Column: "2"}, []string{`""@home.example`}, ""},
		{"named column not in the header", "name,email\nBob,bob@x.example\n", CSVLayout{Column: "mail"}, nil, `no column "mail"; its columns are "name", "email"`},
		{"named column without a header", "bob@x.example\n", CSVLayout{Column: "email"}, nil, "no header row"},
		{"numbered column past the rows", "Name;Firma\nHans;hans@x.example\n", CSVLayout{Column: "99"}, nil, "no column 99: its widest row has 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := csvLaidOut(tc.in, lim, tc.lay)
			if tc.err != "" {
				var e *listError
				if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a *listError containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListTooManyIsMarked(t *testing.T) {
	_, err := csvAddresses("1@x\n2@x\n3@x\n4@x\n5@x\n6@x\n", listLim)
	if !isTooMany(err) {
		t.Fatalf("isTooMany(%v) = false", err)
	}
	_, err = csvAddresses("a\"b@x\n", listLim)
	if isTooMany(err) {
		t.Fatalf("isTooMany(%v) = true for a malformed file", err)
	}
}

func TestListStopsAtAddError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	_, err := ReadListCSV(strings.NewReader("a@x\nb@x\nc@x\n"), listLim, CSVLayout{}, func(string) error { n++; return stop }, nil)
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d addresses, want stop after 1", err, n)
	}
}

// oneByte hands out its input a byte at a time, so every state of the
// scanners meets a chunk boundary.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

func TestListChunkBoundaries(t *testing.T) {
	in := "\ufeffemail,\"note\r\n, here\"\r\n\"é\"\"x@x.example\",1\rb@x.example\n"
	var got []string
	_, err := ReadListCSV(oneByte{strings.NewReader(in)}, listLim, CSVLayout{}, func(a string) error { got = append(got, a); return nil }, nil)
	if want := []string{"é\"x@x.example", "b@x.example"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	got = nil
	obj, err := ReadListJSON(oneByte{strings.NewReader(`{"mode":"quick","emails":["é@x.example","b@x.example"]}`)}, listLim, ListFields{Strings: []string{"mode"}},
		func(a string) error { got = append(got, a); return nil })
	if want := []string{"é@x.example", "b@x.example"}; err != nil || !slices.Equal(got, want) || obj.Strings["mode"] != "quick" {
		t.Fatalf("got %q, %v, %v; want %q", got, obj, err, want)
	}
}

func TestListJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
		err  string
	}{
		{"list and fields", `{"emails":["a@x.example","b@x.example"],"mode":"full"}`, []string{"a@x.example", "b@x.example"}, ""},
		{"JSON whitespace around", " \t\r\n{\"emails\":[]}\n ", nil, ""},
		{"escapes", `{"emails":["\u00e9@x.example"]}`, []string{"é@x.example"}, ""},
		{"empty", "", nil, "empty"},
		{"whitespace only", " \n", nil, "empty"},
		{"form feed before", "\f{\"emails\":[]}", nil, "malformed at byte"},
		{"no-break space after", "{\"emails\":[]}\u00a0", nil, "malformed"},
		{"line separator after", "{\"emails\":[]}\u2028", nil, "malformed"},
		{"array", `["a@x.example"]`, nil, "must be a JSON object"},
		{"unknown field", `{"emails":[],"fast":true}`, nil, `Unknown field "fast"`},
		{"field twice", `{"emails":[],"emails":["a@x"]}`, nil, `"emails" appears twice`},
		{"mode not a string", `{"mode":1}`, nil, `"mode" must be a string`},
		{"emails not a list", `{"emails":"a@x"}`, nil, "must be a list"},
		{"number element", `{"emails":["a@x",1,1,1]}`, nil, "emails[1] must be a string"},
		{"nested element", `{"emails":[["a@x"]]}`, nil, "emails[0] must be a string"},
		{"too many", `{"emails":["1@x","2@x","3@x","4@x","5@x","6@x"]}`, nil, "more than 5"},
		{"long element", `{"emails":["` + strings.Repeat("a", 50) + `"]}`, nil, "Address 1 is longer than 40"},
		{"huge string", `{"emails":["` + strings.Repeat("a", 1<<20) + `"]}`, nil, "longer than 65536 bytes"},
		{"huge number", `{"emails":[` + strings.Repeat("1", 1<<20) + `]}`, nil, "longer than 65536 bytes"},
		{"not UTF-8", "{\"emails\":[\"\xff@x\"]}", nil, "not UTF-8"},
		{"trailing data", `{"emails":[]}{}`, nil, "data after the JSON object"},
		{"cut short", `{"emails":["a@x"`, nil, "ends too early"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			_, err := ReadListJSON(strings.NewReader(tc.in), listLim, ListFields{Strings: []string{"mode"}}, func(a string) error { got = append(got, a); return nil })
			if tc.err != "" {
				var e *listError
				if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a *listError containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestListMemoryBoundedByShape reads the hostile shapes of a 6 MiB body — one
// row of six million commas, an array of three million numbers — and checks
// that the bytes allocated stay a small multiple of the buffers, not of
// the body: encoding/csv and a []json.RawMessage allocate hundreds of
// megabytes for these.
func TestListMemoryBoundedByShape(t *testing.T) {
	big := ListLimits{MaxAddresses: 50000, MaxAddressBytes: 512, MaxRecordBytes: 8 << 20}
	commas := "a@x.example" + strings.Repeat(",", 6<<20) + "\n"
	numbers := `{"emails":["a@x",` + strings.Repeat("1,", 3<<20) + `1]}`
	for name, read := range map[string]func() error{
		"csv commas": func() error {
			_, err := ReadListCSV(strings.NewReader(commas), big, CSVLayout{}, func(string) error { return nil }, nil)
			return err
		},
		"json numbers": func() error {
			_, err := ReadListJSON(strings.NewReader(numbers), big, ListFields{}, func(string) error { return nil })
			var e *listError
			if errors.As(err, &e) {
				return nil // refused at the first number, as it should be
			}
			return err
		},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := read(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
			t.Errorf("%s: allocated %d bytes reading a 6 MiB body; want < 2 MiB", name, alloc)
		}
	}
}

// FuzzListCSV checks the scanner against encoding/csv: on any input that
// encoding/csv reads and that our stricter rules allow (UTF-8, no NUL, no
// CR, records within the limit), the first fields are the same.
func FuzzListCSV(f *testing.F) {
	for _, s := range []string{"a@x\nb@y\n", "email,x\n\"a@x\",\"b\nc\"\n", "\"a\"\"b\"\n", ",\n\nname\n", "a\"b\n", "\"a\"b\n"} {
		f.Add(s)
	}
	l := ListLimits{MaxAddresses: 1 << 20, MaxAddressBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := csvAddresses(in, l)
		if !utf8.ValidString(in) || strings.ContainsAny(in, "\x00\r") || strings.HasPrefix(in, "\ufeff") {
			return
		}
		r := csv.NewReader(bytes.NewReader([]byte(in)))
		r.FieldsPerRecord = -1
		r.Comma = rune(sniffDelimiter([]byte(in)[:min(len(in), sniffBytes)], len(in) <= sniffBytes))
		var want []string
		col, first := -1, true
		for {
			rec, cerr := r.Read()
			if cerr == io.EOF {
				break
			}
			if cerr != nil {
				return // encoding/csv refuses it; ours may too, or be laxer about blank lines
			}
			if col < 0 {
				blank, header := true, true
				for _, f := range rec {
					blank = blank && strings.TrimSpace(f) == ""
					header = header && !strings.Contains(f, "@")
				}
				if blank {
					continue
				}
				if first {
					first = false
					if header {
						for _, set := range [][]string{emailHeaders, addressHeaders} {
							for i, f := range rec {
								if col < 0 && slices.Contains(set, headerKey(f)) {
									col = i
								}
							}
						}
						continue
					}
				}
				col = slices.IndexFunc(rec, func(f string) bool { return strings.Contains(f, "@") })
				if col < 0 {
					// A header that names no address column, over a row
					// with no "@": we ask for column= rather than guess.
					if err == nil {
						t.Fatalf("%q: read as %q; want the file refused (no column holds addresses)", in, got)
					}
					return
				}
			}
			if col < len(rec) {
				if f := strings.TrimSpace(rec[col]); f != "" {
					want = append(want, f)
				}
			}
		}
		if err != nil {
			t.Fatalf("encoding/csv reads %q, we fail: %v", in, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: got %q, encoding/csv %q", in, got, want)
		}
	})
}

// FuzzListJSON checks that ReadListJSON never panics and keeps only strings.
func FuzzListJSON(f *testing.F) {
	for _, s := range []string{`{"emails":["a@x"]}`, `{"mode":"x","emails":[]}`, `[`, `{"emails":[1]}`, "{\"emails\":[\"\\ud800\"]}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_, err := ReadListJSON(strings.NewReader(in), listLim, ListFields{Strings: []string{"mode"}}, func(a string) error {
			if !utf8.ValidString(a) {
				t.Fatalf("passed invalid UTF-8 %q", a)
			}
			return nil
		})
		if err != nil && !utf8.ValidString(err.Error()) {
			t.Fatalf("error not UTF-8: %q", err)
		}
	})
}
