package api

import (
	"cmp"
	"encoding/json"
	"fmt"
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
		Timestamp   string   `json:"timestamp"`
		Destination []string `json:"destination"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string         `json:"bounceType"`
		BouncedRecipients []sesRecipient `json:"bouncedRecipients"`
		Timestamp         string         `json:"timestamp"`
	} `json:"bounce"`
	Delivery *struct {
		Timestamp    string   `json:"timestamp"`
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
	} `json:"delivery"`
	Complaint *struct {
		ComplainedRecipients []sesRecipient `json:"complainedRecipients"`
		Timestamp            string         `json:"timestamp"`
	} `json:"complaint"`
	DeliveryDelay *struct {
		DelayedRecipients []sesRecipient `json:"delayedRecipients"`
		Timestamp         string         `json:"timestamp"`
	} `json:"deliveryDelay"`
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
	at := func(event string) string {
		if event != "" {
			return event
		}
		return n.Mail.Timestamp
	}
	add := func(email, outcome, when, bounceType, reply string) {
		// A reply is evidence, not a reason to drop the outcome.
		reply = trimChars(strings.NewReplacer("\x00", "", "\uFFFD", "").Replace(strings.ToValidUTF8(reply, "")), smtpReplyChars)
		o, err := outcomeOf(outcomeJSON{Email: &email, Outcome: &outcome, At: &when, BounceType: &bounceType,
			SMTPReply: &reply}, now)
		if err != nil {
			skipped++
			return
		}
		os = append(os, o)
	}
	switch kind {
	case "Bounce":
		if n.Bounce == nil {
			return nil, 0, fmt.Errorf("ses: a Bounce without its bounce object")
		}
		bt := ""
		switch n.Bounce.BounceType {
		case "Permanent":
			bt = evs.BounceHard
		case "Transient":
			bt = evs.BounceSoft
		}
		for _, r := range n.Bounce.BouncedRecipients {
			add(r.EmailAddress, string(evs.OutcomeBounced), at(n.Bounce.Timestamp), bt, diagnostic(r))
		}
	case "Delivery":
		if n.Delivery == nil {
			return nil, 0, fmt.Errorf("ses: a Delivery without its delivery object")
		}
		for _, r := range n.Delivery.Recipients {
			add(r, string(evs.OutcomeDelivered), at(n.Delivery.Timestamp), "", n.Delivery.SMTPResponse)
		}
	case "Complaint":
		if n.Complaint == nil {
			return nil, 0, fmt.Errorf("ses: a Complaint without its complaint object")
		}
		for _, r := range n.Complaint.ComplainedRecipients {
			add(r.EmailAddress, string(evs.OutcomeComplained), at(n.Complaint.Timestamp), "", "")
		}
	case "DeliveryDelay":
		if n.DeliveryDelay == nil {
			return nil, 0, fmt.Errorf("ses: a DeliveryDelay without its deliveryDelay object")
		}
		for _, r := range n.DeliveryDelay.DelayedRecipients {
			add(r.EmailAddress, string(evs.OutcomeDeferred), at(n.DeliveryDelay.Timestamp), "", diagnostic(r))
		}
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
