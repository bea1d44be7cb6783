package verify

import (
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// untrustedAccept turns an accepted RCPT at a receiver whose 250 is not
// proof into accept_all (smtpprobe.ProviderInfo says which ones). A
// security gateway without recipient verification takes every RCPT and
// the store behind it bounces later: only a rejected random address shows
// verification is on. Yahoo and AOL bounce unknown users after the message,
// so their 250 is never proof.
func untrustedAccept(c *evs.SMTPCheck, catchAll string) {
	info := smtpprobe.Provider(c.Provider).Info()
	switch {
	case info == nil:
	case info.AcceptThenBounce:
		c.Result = evs.SMTPAcceptAll
		c.Detail = info.Name + " accepts at RCPT addresses it bounces after the message, so its 250 is not proof"
	case info.Gateway && catchAll != evs.SMTPRejected:
		c.Result = evs.SMTPAcceptAll
		c.Detail = info.Name + " gateway accepts at RCPT addresses it may bounce later, and the random-address probe did not show recipient verification (" + catchAll + ")"
	}
}
