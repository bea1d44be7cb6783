package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Amazon SES's Bounce, Delivery and Complaint notifications (the JSON
// Message of an SNS notification; AWS's "Amazon SNS notification contents
// for Amazon SES"), and the same events as configuration-set event
// publishing sends them (eventType instead of notificationType, plus
// DeliveryDelay), turned into the outcomes POST /v1/outcomes stores.

// sesNotification holds the fields evs reads; SES adds others freely.
type sesNotification struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Mail             struct {
		Timestamp string `json:"timestamp"`
	} `json:"mail"`
	Bounce        *sesEvent `json:"bounce"`
	Delivery      *sesEvent `json:"delivery"`
	Complaint     *sesEvent `json:"complaint"`
	DeliveryDelay *sesEvent `json:"deliveryDelay"`
}

// sesEvent is the object of any of the four types, each of which fills
// its own fields.
type sesEvent struct {
	Timestamp            string         `json:"timestamp"`
	BounceType           string         `json:"bounceType"`
	BouncedRecipients    []sesRecipient `json:"bouncedRecipients"`
	ComplainedRecipients []sesRecipient `json:"complainedRecipients"`
	DelayedRecipients    []sesRecipient `json:"delayedRecipients"`
	Recipients           []string       `json:"recipients"` // a Delivery's
	SMTPResponse         string         `json:"smtpResponse"`
}

type sesRecipient struct {
	EmailAddress   string `json:"emailAddress"`
	Status         string `json:"status"`
	DiagnosticCode string `json:"diagnosticCode"`
}

// SESOutcomes reads an SES notification into outcomes, one per recipient
// it names: a Permanent bounce is bounced/hard, a Transient one
// bounced/soft, an Undetermined one bounced; a Delivery is delivered, a
// Complaint complained, a DeliveryDelay deferred, at the event's time (else
// the mail's). Other types give nothing and no error. A recipient whose
// address or time is not valid is left out and counted in skipped. now
// bounds how late a time may be.
func SESOutcomes(msg []byte, now time.Time) (os []evs.Outcome, skipped int, err error) {
	var n sesNotification
	if err := json.Unmarshal(msg, &n); err != nil {
		return nil, 0, fmt.Errorf("ses: not an SES notification: %w", err)
	}
	kind := cmp.Or(n.NotificationType, n.EventType)
	var ev *sesEvent
	var outcome evs.OutcomeKind
	switch kind {
	case "Bounce":
		ev, outcome = n.Bounce, evs.OutcomeBounced
	case "Delivery":
		ev, outcome = n.Delivery, evs.OutcomeDelivered
	case "Complaint":
		ev, outcome = n.Complaint, evs.OutcomeComplained
	case "DeliveryDelay":
		ev, outcome = n.DeliveryDelay, evs.OutcomeDeferred
	default:
		return nil, 0, nil
	}
	if ev == nil {
		return nil, 0, fmt.Errorf("ses: a %s without its %s object", kind, strings.ToLower(kind[:1])+kind[1:])
	}
	bt := map[string]string{"Permanent": evs.BounceHard, "Transient": evs.BounceSoft}[ev.BounceType]
	at, what := cmp.Or(ev.Timestamp, n.Mail.Timestamp), string(outcome)
	add := func(email, reply string) {
		// A reply is evidence, not a reason to drop the outcome.
		reply = trimChars(strings.NewReplacer("\x00", "", "\uFFFD", "").Replace(strings.ToValidUTF8(reply, "")), smtpReplyChars)
		o, err := outcomeOf(outcomeJSON{Email: &email, Outcome: &what, At: &at, BounceType: &bt, SMTPReply: &reply}, now)
		if err != nil {
			skipped++
			return
		}
		os = append(os, o)
	}
	// Each type fills only its own list; a complaint's recipients carry no
	// reply, so diagnostic is "" for them.
	for _, r := range slices.Concat(ev.BouncedRecipients, ev.ComplainedRecipients, ev.DelayedRecipients) {
		add(r.EmailAddress, diagnostic(r))
	}
	for _, r := range ev.Recipients {
		add(r, ev.SMTPResponse)
	}
	return os, skipped, nil
}

// diagnostic is a recipient's reply as the receiving server gave it: the
// DSN's diagnostic code without its "smtp; " type, else its status.
func diagnostic(r sesRecipient) string {
	d := strings.TrimSpace(r.DiagnosticCode)
	if i := strings.IndexByte(d, ';'); i > 0 && i < 10 && strings.EqualFold(strings.TrimSpace(d[:i]), "smtp") {
		d = strings.TrimSpace(d[i+1:])
	}
	return cmp.Or(d, r.Status)
}
