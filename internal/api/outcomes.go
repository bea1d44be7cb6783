package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
)

// Limits of POST /v1/outcomes (its body's is Deps.MaxBatchBody).
const (
	MaxOutcomes = MaxBatchAddresses
	// MaxSMTPReplyBytes bounds a reported smtpReply; it is kept trimmed to
	// 200 characters, as every SMTP text.
	MaxSMTPReplyBytes = 2048
	smtpReplyChars    = 200
	// outcomeFutureSkew: clocks differ, but a time an hour ahead is a
	// mistake, and would outrank every real report until then.
	outcomeFutureSkew = time.Hour
	DefaultOutcomeTTL = config.DefaultOutcomeTTL // EVS_OUTCOME_TTL's default
)

// Outcomes is the store of reported outcomes (both stores implement it).
type Outcomes = store.Outcomes

// outcomeJSON is one outcome as the JSON body has it; pointers tell a
// missing field from an empty one.
type outcomeJSON struct {
	Email      *string `json:"email"`
	Outcome    *string `json:"outcome"`
	At         *string `json:"at"`
	BounceType *string `json:"bounceType"`
	SMTPReply  *string `json:"smtpReply"`
}

type outcomesResponse struct {
	// Duplicates were already stored or repeated in the request.
	Received   int `json:"received"`
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

var outcomeFields = []string{"email", "outcome", "at", "bounceType", "smtpReply"}

// ParseOutcomes reads a POST /v1/outcomes body of media type mt into
// outcomes with normalised addresses and millisecond times, in the body's
// order. The whole request is refused at its first bad outcome, with an
// error naming it ("outcomes[3]", "row 4") and the field. now bounds how
// late an outcome's time may be.
func ParseOutcomes(mt string, body []byte, now time.Time) ([]evs.Outcome, error) {
	switch mt {
	case "application/json":
		return parseOutcomesJSON(body, now)
	case "text/csv":
		return parseOutcomesCSV(body, now)
	default:
		return nil, evs.Errorf(evs.CodeInvalidRequest, "Content-Type must be application/json or text/csv.")
	}
}

// parseOutcomesJSON reads the outcomes list an outcome at a time, each
// checked as it comes: memory never holds the whole list decoded.
func parseOutcomesJSON(body []byte, now time.Time) ([]evs.Outcome, error) {
	if !utf8.Valid(body) {
		return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid UTF-8.")
	}
	bad := func(err error) error {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid: %s.", jsonProblem(err))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	switch t, err := dec.Token(); {
	case err == io.EOF:
		return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body is empty; a JSON object is required.")
	case err != nil:
		return nil, bad(err)
	case t != json.Delim('{'):
		return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body must be a JSON object.")
	}
	var out []evs.Outcome
	listed := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		// encoding/json matches a field's name in any case.
		if name, _ := t.(string); !strings.EqualFold(name, "outcomes") || listed {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid: unknown or repeated field %q.", trimChars(name, 40))
		}
		switch t, err := dec.Token(); {
		case err != nil:
			return nil, bad(err)
		case t == nil:
			continue // null: as if missing
		case t != json.Delim('['):
			return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid: field \"outcomes\" must be a list.")
		}
		listed = true
		for i := 0; dec.More(); i++ {
			if i == MaxOutcomes {
				return nil, evs.Errorf(evs.CodeInvalidRequest, "A request holds at most %d outcomes.", MaxOutcomes)
			}
			var o outcomeJSON
			if err := dec.Decode(&o); err != nil {
				return nil, bad(err)
			}
			v, err := outcomeOf(o, now)
			if err != nil {
				return nil, evs.Errorf(evs.CodeInvalidRequest, "outcomes[%d]: %s", i, err.Error())
			}
			out = append(out, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, bad(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body has data after the JSON object.")
	}
	if !listed {
		return nil, evs.Errorf(evs.CodeInvalidRequest, "Field \"outcomes\" is required.")
	}
	return out, outcomeCount(len(out))
}

func outcomeCount(n int) error {
	switch {
	case n == 0:
		return evs.Errorf(evs.CodeInvalidRequest, "The request holds no outcomes.")
	case n > MaxOutcomes:
		return evs.Errorf(evs.CodeInvalidRequest, "A request holds at most %d outcomes; this one has %d.", MaxOutcomes, n)
	}
	return nil
}

// fieldError is a problem with one field of one outcome, for the client.
type fieldError string

func (e fieldError) Error() string { return string(e) }

func fieldErrorf(format string, args ...any) error { return fieldError(fmt.Sprintf(format, args...)) }

// str is *p, "" when p is nil.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func outcomeOf(in outcomeJSON, now time.Time) (evs.Outcome, error) {
	if in.Email == nil || *in.Email == "" {
		return evs.Outcome{}, fieldErrorf("field \"email\" is required.")
	}
	email := *in.Email
	if len(email) > MaxEmailLength {
		return evs.Outcome{}, fieldErrorf("field \"email\" is longer than %d bytes.", MaxEmailLength)
	}
	if strings.ContainsRune(email, utf8.RuneError) || strings.ContainsRune(email, 0) {
		return evs.Outcome{}, fieldErrorf("field \"email\" holds U+FFFD or a NUL character.")
	}
	addr, _, ok := verify.NormalizedKey(email)
	if !ok {
		return evs.Outcome{}, fieldErrorf("field \"email\" is not a valid address.")
	}
	o := evs.Outcome{Address: addr}
	switch k := evs.OutcomeKind(str(in.Outcome)); k {
	case evs.OutcomeDelivered, evs.OutcomeBounced, evs.OutcomeComplained, evs.OutcomeDeferred:
		o.Kind = k
	case "":
		return evs.Outcome{}, fieldErrorf("field \"outcome\" is required.")
	default:
		return evs.Outcome{}, fieldErrorf("field \"outcome\" must be delivered, bounced, complained or deferred.")
	}
	at := str(in.At)
	if at == "" {
		return evs.Outcome{}, fieldErrorf("field \"at\" is required.")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return evs.Outcome{}, fieldErrorf("field \"at\" must be an RFC 3339 timestamp such as 2026-11-22T10:04:05Z.")
	}
	if t.After(now.Add(outcomeFutureSkew)) {
		return evs.Outcome{}, fieldErrorf("field \"at\" is more than an hour in the future.")
	}
	// The stores keep milliseconds, and so must the natural key.
	o.At = t.UTC().Truncate(time.Millisecond)
	switch bt := str(in.BounceType); {
	case bt == "":
	case o.Kind != evs.OutcomeBounced:
		return evs.Outcome{}, fieldErrorf("field \"bounceType\" is only for outcome \"bounced\".")
	case bt == evs.BounceHard || bt == evs.BounceSoft:
		o.BounceType = bt
	default:
		return evs.Outcome{}, fieldErrorf("field \"bounceType\" must be hard or soft.")
	}
	reply := str(in.SMTPReply)
	switch {
	case len(reply) > MaxSMTPReplyBytes:
		return evs.Outcome{}, fieldErrorf("field \"smtpReply\" is longer than %d bytes.", MaxSMTPReplyBytes)
	case strings.ContainsRune(reply, utf8.RuneError) || strings.ContainsRune(reply, 0):
		return evs.Outcome{}, fieldErrorf("field \"smtpReply\" holds U+FFFD or a NUL character.")
	}
	o.SMTPReply = trimChars(strings.TrimSpace(reply), smtpReplyChars)
	return o, nil
}

// trimChars cuts s to its first n characters, then trims the spaces the cut leaves.
func trimChars(s string, n int) string {
	for j := range s {
		if n--; n < 0 {
			return strings.TrimSpace(s[:j])
		}
	}
	return s
}

var outcomesCSVLimits = ListLimits{MaxAddresses: math.MaxInt, MaxAddressBytes: defaultMaxRecordBytes}

// parseOutcomesCSV reads the records with the batch list's bounded parser
// (ReadListCSV); the first is the header.
func parseOutcomesCSV(body []byte, now time.Time) ([]evs.Outcome, error) {
	var out []evs.Outcome
	var col map[string]int
	width, row := 0, 0
	_, err := ReadListCSV(bytes.NewReader(body), outcomesCSVLimits, CSVLayout{Column: "1", Delimiter: ','},
		func(string) error { return nil },
		func(rec CSVRecord) error {
			row++
			if col == nil {
				var err error
				col, err = outcomeColumns(rec.Fields)
				width = len(rec.Fields)
				return err
			}
			switch {
			case len(rec.Fields) != width:
				return evs.Errorf(evs.CodeInvalidRequest, "row %d: %d fields, but the header has %d.", row, len(rec.Fields), width)
			case len(out) == MaxOutcomes:
				return evs.Errorf(evs.CodeInvalidRequest, "A request holds at most %d outcomes.", MaxOutcomes)
			}
			field := func(name string) *string {
				i, ok := col[name]
				if !ok {
					return nil
				}
				v := string(bytes.TrimSpace(rec.Fields[i]))
				return &v
			}
			o, err := outcomeOf(outcomeJSON{Email: field("email"), Outcome: field("outcome"), At: field("at"),
				BounceType: field("bounceType"), SMTPReply: field("smtpReply")}, now)
			if err != nil {
				return evs.Errorf(evs.CodeInvalidRequest, "row %d: %s", row, err.Error())
			}
			out = append(out, o)
			return nil
		})
	if err != nil {
		return nil, listErr(err)
	}
	return out, outcomeCount(len(out))
}

func outcomeColumns(header [][]byte) (map[string]int, error) {
	col := map[string]int{}
	for i, h := range header {
		name := strings.TrimSpace(string(h))
		f := slices.IndexFunc(outcomeFields, func(f string) bool { return strings.EqualFold(name, f) })
		if f < 0 {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "row 1: unknown column %q; the columns are email, outcome, at, bounceType and smtpReply.", trimChars(name, 40))
		}
		name = outcomeFields[f]
		if _, dup := col[name]; dup {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "row 1: column %q appears twice.", name)
		}
		col[name] = i
	}
	for _, f := range outcomeFields[:3] {
		if _, ok := col[f]; !ok {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "row 1: the header has no column %q; it must name email, outcome and at (bounceType and smtpReply are optional).", f)
		}
	}
	return col, nil
}

func (h *Handler) postOutcomes(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if h.d.Outcomes == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeNotFound, "Unknown route.")
	}
	now := h.d.Now()
	os, err := ParseOutcomes(mediaType(req), req.body, now)
	if err != nil {
		return idempotency.Reply{}, err
	}
	CallFromContext(ctx).Attr = slog.Int("outcomes", len(os))
	resp, _, err := h.idempotent(ctx, req, p, func(ctx context.Context) idempotency.Reply {
		r, err := keepOutcomes(ctx, h.d.Ledger, h.d.Outcomes, p, os, now, h.d.OutcomeTTL)
		if err != nil {
			return errReply(err)
		}
		return jsonReply(http.StatusOK, r)
	})
	return resp, err
}

// keepOutcomes is storeOutcomes within the account's outcomes cap and
// storage quota (l, nil for none): all of os is charged first, and what
// was not added is given back. POST /v1/outcomes and SNS share it.
func keepOutcomes(ctx context.Context, l Ledger, st Outcomes, p evs.Principal, os []evs.Outcome, now time.Time, ttl time.Duration) (outcomesResponse, error) {
	until, n := now.Add(ttl), int64(len(os))
	if l != nil {
		if err := l.Charge(ctx, p, KeptOutcomes, n, until); err != nil {
			return outcomesResponse{}, err
		}
		if err := l.Charge(ctx, p, KeptBytes, n*outcomeBytes, until); err != nil {
			l.Release(ctx, p.AccountID, KeptOutcomes, n, until)
			return outcomesResponse{}, err
		}
	}
	r, err := storeOutcomes(ctx, st, p.AccountID, os, now, ttl)
	if l != nil {
		if err == nil {
			n -= int64(r.Accepted)
		}
		l.Release(ctx, p.AccountID, KeptOutcomes, n, until)
		l.Release(ctx, p.AccountID, KeptBytes, n*outcomeBytes, until)
	}
	return r, err
}

// storeOutcomes keeps the new ones of os, each with the verdict the
// account had on its address before it (for the report), until now+ttl.
func storeOutcomes(ctx context.Context, st Outcomes, accountID string, os []evs.Outcome, now time.Time, ttl time.Duration) (outcomesResponse, error) {
	type natural struct {
		addr string
		kind evs.OutcomeKind
		at   int64
	}
	seen := make(map[natural]bool, len(os))
	uniq := os[:0:0]
	var addrs []string
	byAddr := map[string]bool{}
	for _, o := range os {
		k := natural{o.Address, o.Kind, o.At.UnixMilli()}
		if seen[k] {
			continue
		}
		seen[k] = true
		uniq = append(uniq, o)
		if !byAddr[o.Address] {
			byAddr[o.Address] = true
			addrs = append(addrs, o.Address)
		}
	}
	last, err := st.LastVerdicts(ctx, accountID, addrs)
	if err != nil {
		return outcomesResponse{}, fmt.Errorf("api: read the verdicts before the outcomes: %w", err)
	}
	for i := range uniq {
		if d, ok := last[uniq[i].Address]; ok && !d.CheckedAt.After(uniq[i].At) {
			uniq[i].Verdict, uniq[i].Score = d.Status(), verify.Score(d)
		}
	}
	added, err := st.PutOutcomes(ctx, accountID, uniq, now.Add(ttl))
	if err != nil {
		return outcomesResponse{}, fmt.Errorf("api: store outcomes: %w", err)
	}
	return outcomesResponse{Received: len(os), Accepted: added, Duplicates: len(os) - added}, nil
}

func (h *Handler) deleteOutcomes(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if h.d.Outcomes == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeNotFound, "Unknown route.")
	}
	if len(req.body) > 0 && len(bytes.TrimSpace(req.body)) > 0 {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "DELETE /v1/outcomes takes no body; name the address with ?email=.")
	}
	for k := range req.query {
		if k != "email" {
			return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown query parameter %q; DELETE /v1/outcomes takes email.", trimChars(k, 40))
		}
	}
	email := req.query["email"]
	if email == "" {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Query parameter \"email\" is required.")
	}
	addr, domain, ok := verify.NormalizedKey(email)
	if len(email) > MaxEmailLength || !utf8.ValidString(email) || !ok {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Query parameter \"email\" is not a valid address.")
	}
	CallFromContext(ctx).Attr = slog.String("domain", domain)
	n, err := h.d.Outcomes.DeleteOutcomes(ctx, p.AccountID, addr)
	if err != nil {
		return idempotency.Reply{}, fmt.Errorf("api: delete outcomes: %w", err)
	}
	if l := h.d.Ledger; l != nil {
		// Their hours are not known: the latest charges give them back.
		l.Release(ctx, p.AccountID, KeptOutcomes, int64(n), time.Time{})
		l.Release(ctx, p.AccountID, KeptBytes, int64(n)*outcomeBytes, time.Time{})
	}
	return jsonReply(http.StatusOK, struct {
		Deleted int `json:"deleted"`
	}{n}), nil
}

// Score buckets of the report: ranges a calibration table reads well at.
var scoreBuckets = [...]struct {
	name   string
	lo, hi int
}{{"0-19", 0, 19}, {"20-39", 20, 39}, {"40-59", 40, 59}, {"60-79", 60, 79}, {"80-100", 80, 100}}

const notVerified = "not_verified"

type reportRow struct {
	Status      string   `json:"status"`
	ScoreBucket *string  `json:"scoreBucket"` // null for not_verified
	Sent        int      `json:"sent"`
	Delivered   int      `json:"delivered"`
	HardBounces int      `json:"hardBounces"`
	SoftBounces int      `json:"softBounces"`
	Complaints  int      `json:"complaints"`
	Deferrals   int      `json:"deferrals"`
	BounceRate  *float64 `json:"bounceRate"` // HardBounces / Sent, null when nothing was sent
}

type outcomesReport struct {
	Outcomes int         `json:"outcomes"`
	Rows     []reportRow `json:"rows"`
}

// outcomesReport serves GET /v1/outcomes/report: the account's outcomes
// counted by the verdict and score bucket it had on each address before
// the outcome. "Sent" are the deliveries and bounces.
func (h *Handler) outcomesReport(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if h.d.Outcomes == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeNotFound, "Unknown route.")
	}
	for k := range req.query {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown query parameter %q; the report takes none.", trimChars(k, 40))
	}
	rep, err := buildOutcomesReport(ctx, h.d.Outcomes, p.AccountID)
	if err != nil {
		return idempotency.Reply{}, err
	}
	return jsonReply(http.StatusOK, rep), nil
}

func buildOutcomesReport(ctx context.Context, st Outcomes, accountID string) (outcomesReport, error) {
	statuses := []string{string(evs.Deliverable), string(evs.Risky), string(evs.Unknown), string(evs.Undeliverable), notVerified}
	type cell struct{ status, bucket int }
	counts := map[cell]*reportRow{}
	total := 0
	err := st.EachOutcome(ctx, accountID, func(o evs.Outcome) error {
		total++
		c := cell{status: len(statuses) - 1, bucket: -1}
		if o.Verdict != "" {
			if i := slices.Index(statuses, string(o.Verdict)); i >= 0 {
				c.status = i
			}
			for i, b := range scoreBuckets {
				if o.Score >= b.lo && o.Score <= b.hi {
					c.bucket = i
				}
			}
		}
		r := counts[c]
		if r == nil {
			r = &reportRow{Status: statuses[c.status]}
			if c.bucket >= 0 {
				r.ScoreBucket = &scoreBuckets[c.bucket].name
			}
			counts[c] = r
		}
		switch {
		case o.Kind == evs.OutcomeDelivered:
			r.Delivered++
		case o.HardBounce():
			r.HardBounces++
		case o.Kind == evs.OutcomeBounced:
			r.SoftBounces++
		case o.Kind == evs.OutcomeComplained:
			r.Complaints++
		case o.Kind == evs.OutcomeDeferred:
			r.Deferrals++
		}
		return nil
	})
	if err != nil {
		return outcomesReport{}, fmt.Errorf("api: read outcomes: %w", err)
	}
	rep := outcomesReport{Outcomes: total, Rows: []reportRow{}}
	for s := range statuses {
		for b := len(scoreBuckets) - 1; b >= -1; b-- {
			r := counts[cell{s, b}]
			if r == nil {
				continue
			}
			if r.Sent = r.Delivered + r.HardBounces + r.SoftBounces; r.Sent > 0 {
				rate := float64(r.HardBounces) / float64(r.Sent)
				r.BounceRate = &rate
			}
			rep.Rows = append(rep.Rows, *r)
		}
	}
	return rep, nil
}
