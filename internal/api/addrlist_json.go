package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"slices"
)

// maxJSONScalar is the longest JSON string or number ReadListJSON accepts, in
// bytes as written: longer than any address even fully \u-escaped, and it
// keeps the decoder from buffering a 100 MiB string.
const maxJSONScalar = 64 << 10

// ListObject is what ReadListJSON read besides the list.
type ListObject struct {
	// Strings holds the string fields that were present, by name.
	Strings map[string]string
	// Numbers holds the number fields that were present, by name, as
	// written (ListFields.Numbers).
	Numbers map[string]json.Number
	// HasEmails reports whether the "emails" field was present.
	HasEmails bool
}

// ListFields names the fields ReadListJSON accepts besides "emails".
type ListFields struct {
	Strings []string // must be strings
	Numbers []string // must be numbers
}

// ReadListJSON reads one JSON object from r whose "emails" array of
// strings is the list, passed to add in order (an error from add stops the
// read). The fields named in fields must be of their kind and are returned
// in ListObject; any other field, a repeated one, trailing data and invalid
// UTF-8 are *listError values. Memory is bounded by one element.
func ReadListJSON(r io.Reader, lim ListLimits, fields ListFields, add func(addr string) error) (ListObject, error) {
	g := &scalarGuard{r: bufio.NewReaderSize(newUTF8Reader(r, "JSON"), 64<<10)}
	dec := json.NewDecoder(g)
	dec.UseNumber()
	out := ListObject{Strings: map[string]string{}, Numbers: map[string]json.Number{}}
	problem := func(err error) error {
		if e, ok := errors.AsType[*listError](err); ok {
			return e
		}
		if g.err != nil {
			return g.err
		}
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return listErrorf("The JSON is malformed at byte %d.", se.Offset)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return listErrorf("The JSON ends too early.")
		}
		return err // the reader's own failure
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return out, listErrorf("The body is empty; a JSON object is required.")
	}
	if err != nil {
		return out, problem(err)
	}
	if tok != json.Delim('{') {
		return out, listErrorf("The body must be a JSON object.")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out, problem(err)
		}
		name := tok.(string) // object keys are strings
		if seen[name] {
			return out, listErrorf("Field %q appears twice.", name)
		}
		seen[name] = true
		switch {
		case name == "emails":
			out.HasEmails = true
			if err := readEmails(dec, lim, add); err != nil {
				return out, problem(err)
			}
		case slices.Contains(fields.Numbers, name), slices.Contains(fields.Strings, name):
			tok, err := dec.Token()
			if err != nil {
				return out, problem(err)
			}
			n, isNumber := tok.(json.Number)
			s, isString := tok.(string)
			switch number := slices.Contains(fields.Numbers, name); {
			case number && !isNumber:
				return out, listErrorf("Field %q must be a number.", name)
			case number:
				out.Numbers[name] = n
			case !isString:
				return out, listErrorf("Field %q must be a string.", name)
			default:
				out.Strings[name] = s
			}
		default:
			return out, listErrorf("Unknown field %q.", name)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return out, problem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return out, listErrorf("The body has data after the JSON object.")
		}
		return out, problem(err)
	}
	return out, nil
}

// readEmails reads the "emails" array.
func readEmails(dec *json.Decoder, lim ListLimits, add func(string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return listErrorf("Field \"emails\" must be a list of strings.")
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		s, ok := tok.(string)
		if !ok {
			return listErrorf("emails[%d] must be a string.", n)
		}
		if len(s) > lim.MaxAddressBytes {
			return listErrorf("Address %d is longer than %d bytes.", n+1, lim.MaxAddressBytes)
		}
		if n == lim.MaxAddresses {
			return tooMany(lim.MaxAddresses)
		}
		n++
		if err := add(s); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing bracket
	return err
}

// scalarGuard fails a read that would make the decoder buffer a string or
// number longer than maxJSONScalar, tracking scalars byte by byte.
type scalarGuard struct {
	r        io.Reader
	inString bool
	escaped  bool
	run      int
	err      error
}

func (g *scalarGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	for i, c := range p[:n] {
		switch {
		case g.inString:
			g.run++
			switch {
			case g.escaped:
				g.escaped = false
			case c == '\\':
				g.escaped = true
			case c == '"':
				g.inString, g.run = false, 0
			}
		case c == '"':
			g.inString, g.run = true, 1
		case c == ' ', c == '\t', c == '\n', c == '\r', c == ',', c == ':',
			c == '[', c == ']', c == '{', c == '}':
			g.run = 0
		default:
			g.run++
		}
		if g.run > maxJSONScalar {
			g.err = listErrorf("The JSON holds a string or number longer than %d bytes.", maxJSONScalar)
			return i, nil
		}
	}
	return n, err
}
