package api

import (
	"strconv"

	"github.com/evs-dev/evs/internal/jsontext"
)

// The hot replies (a verification, a page of results) are encoded by hand:
// encoding/json walks the same nested structs by reflection on every call,
// and on POST /v1/verify that was a fifth of the handler's time. The output
// is byte for byte what json.Marshal writes for the same value — the tests
// and a fuzz target hold the two side by side — so the wire form is still
// defined by the struct tags in wire.go.

// jsonAppender is a reply body that encodes itself.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

func (r verifyResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = appendJSONString(b, string(r.Status))
	b = append(b, `,"decision":`...)
	b = r.Decision.AppendJSON(b)
	return append(b, '}')
}

func (e batchEnvelope) appendJSON(b []byte) []byte {
	r := e.Request
	b = append(b, `{"request":{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, string(r.Mode))
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	b = appendOptString(b, `,"error":`, r.Error)
	b = append(b, `,"createdAt":`...)
	b = appendTime(b, r.CreatedAt)
	if r.CompletedAt != nil {
		b = append(b, `,"completedAt":`...)
		b = appendTime(b, *r.CompletedAt)
	}
	b = appendOptString(b, `,"callbackUrl":`, r.CallbackURL)
	if c := r.Callback; c != nil {
		b = append(b, `,"callback":{"state":`...)
		b = appendJSONString(b, string(c.State))
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(c.Attempts), 10)
		b = append(b, `,"lastStatus":`...)
		if c.LastStatus == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, int64(*c.LastStatus), 10)
		}
		b = append(b, '}')
	}
	n := e.Counters
	b = append(b, `},"counters":{"total":`...)
	b = strconv.AppendInt(b, int64(n.Total), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendInt(b, int64(n.Duplicates), 10)
	b = append(b, `,"processed":`...)
	b = strconv.AppendInt(b, int64(n.Processed), 10)
	b = append(b, `,"deliverable":`...)
	b = strconv.AppendInt(b, int64(n.Deliverable), 10)
	b = append(b, `,"undeliverable":`...)
	b = strconv.AppendInt(b, int64(n.Undeliverable), 10)
	b = append(b, `,"risky":`...)
	b = strconv.AppendInt(b, int64(n.Risky), 10)
	b = append(b, `,"unknown":`...)
	b = strconv.AppendInt(b, int64(n.Unknown), 10)
	b = append(b, `},"replayed":`...)
	b = strconv.AppendBool(b, e.Replayed)
	return append(b, '}')
}

// appendTime appends t as Time.MarshalJSON writes it, digit by digit:
// AppendFormat parses its layout on every call.
func appendTime(b []byte, t Time) []byte {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		b = append(b, '"')
		b = u.AppendFormat(b, TimeLayout)
		return append(b, '"')
	}
	b = append(b, '"')
	b = jsontext.AppendDateTime(b, u)
	b = append(b, '.')
	b = jsontext.AppendDigits(b, u.Nanosecond()/1e6, 3)
	return append(b, 'Z', '"')
}

// AppendJSON appends the decision's JSON, exactly as json.Marshal would
// write it, to b.
func (d Decision) AppendJSON(b []byte) []byte {
	b = append(b, `{"email":`...)
	b = appendJSONString(b, d.Email)
	b = append(b, `,"normalized":`...)
	b = appendJSONString(b, d.Normalized)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, string(d.Reason))
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, string(d.Mode))
	b = append(b, `,"suggestion":`...)
	if d.Suggestion == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *d.Suggestion)
	}
	f := d.Flags
	b = append(b, `,"flags":{"disposable":`...)
	b = strconv.AppendBool(b, f.Disposable)
	b = append(b, `,"role":`...)
	b = strconv.AppendBool(b, f.Role)
	b = append(b, `,"free":`...)
	b = strconv.AppendBool(b, f.Free)
	b = append(b, `,"acceptAll":`...)
	b = strconv.AppendBool(b, f.AcceptAll)
	b = append(b, `,"smtputf8":`...)
	b = strconv.AppendBool(b, f.SMTPUTF8)

	c := d.Checks
	b = append(b, `},"checks":{"syntax":{"valid":`...)
	b = strconv.AppendBool(b, c.Syntax.Valid)
	b = appendOptString(b, `,"error":`, c.Syntax.Error)
	b = append(b, `},"dns":{"result":`...)
	b = appendJSONString(b, c.DNS.Result)
	b = append(b, `,"mx":`...)
	if c.DNS.MX == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, h := range c.DNS.MX {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, h)
		}
		b = append(b, ']')
	}
	b = append(b, `,"implicitMx":`...)
	b = strconv.AppendBool(b, c.DNS.ImplicitMX)
	b = appendOptString(b, `,"rcode":`, c.DNS.Rcode)
	b = appendOptString(b, `,"error":`, c.DNS.Error)
	s := c.SMTP
	b = append(b, `},"smtp":{"result":`...)
	b = appendJSONString(b, s.Result)
	b = appendOptString(b, `,"host":`, s.Host)
	b = append(b, `,"provider":`...)
	if s.Provider == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *s.Provider)
	}
	if s.Code != 0 {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(s.Code), 10)
	}
	b = appendOptString(b, `,"enhancedCode":`, s.EnhancedCode)
	b = appendOptString(b, `,"message":`, s.Message)
	b = append(b, `,"tls":`...)
	b = strconv.AppendBool(b, s.TLS)
	b = appendOptString(b, `,"detail":`, s.Detail)
	b = append(b, `}},"checkedAt":`...)
	b = appendTime(b, d.CheckedAt)
	b = append(b, `,"durationMs":`...)
	b = strconv.AppendInt(b, d.DurationMs, 10)
	if d.TestMode {
		b = append(b, `,"testMode":true`...)
	}
	return append(b, '}')
}

// appendOptString is an omitempty string member: name (with its leading
// comma and colon) and value, or nothing when value is empty.
func appendOptString(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	return appendJSONString(append(b, name...), value)
}

// appendJSONString appends s as a JSON string the way json.Marshal does.
func appendJSONString(b []byte, s string) []byte {
	return jsontext.AppendString(b, s)
}
