package verify

import (
	"strings"

	"github.com/evs-dev/evs/internal/evs"
)

// bounceReceiver is a receiver known to accept at RCPT addresses that it
// later bounces, so a 250 at RCPT from it is not proof that mail arrives.
type bounceReceiver struct {
	// Suffix is an MX host name suffix, matched on a label boundary.
	Suffix string
	// Name is the receiver, as said in the evidence.
	Name string
	// Always marks receivers whose 250 means nothing even when they
	// reject a random address: they refuse unknown addresses at RCPT
	// only sometimes, and bounce the rest after DATA.
	Always bool
}

// acceptThenBounce lists the receivers whose RCPT answer cannot be taken
// as "deliverable".
//
// Security gateways sit in front of the real mail store. With recipient
// verification off (or deferred, as Mimecast's default 451 for unknown
// internal users) they take every RCPT and the store bounces later; with
// it on, they reject unknown addresses at RCPT. So for a gateway a
// rejected random address shows that verification is on and the 250 can
// be trusted, while a greylisted, timed-out or otherwise inconclusive
// random address leaves the 250 meaningless.
//
// Yahoo and AOL (both on yahoodns.net) document bounces for non-existent
// users sent after the message ("failed after I sent the message ... 554
// delivery error: dd This user doesn't have a yahoo.com account"), so
// their 250 at RCPT is never proof.
var acceptThenBounce = []bounceReceiver{
	{Suffix: "pphosted.com", Name: "Proofpoint"},
	{Suffix: "ppe-hosted.com", Name: "Proofpoint Essentials"},
	{Suffix: "mimecast.com", Name: "Mimecast"},
	{Suffix: "mimecast.co.za", Name: "Mimecast"},
	{Suffix: "barracudanetworks.com", Name: "Barracuda Email Security"},
	{Suffix: "iphmx.com", Name: "Cisco Secure Email (IronPort hosted)"},
	{Suffix: "yahoodns.net", Name: "Yahoo/AOL", Always: true},
}

// bounceReceiverOf returns the accept-then-bounce receiver an MX host
// belongs to, or nil.
func bounceReceiverOf(host string) *bounceReceiver {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for i, r := range acceptThenBounce {
		if h == r.Suffix || strings.HasSuffix(h, "."+r.Suffix) {
			return &acceptThenBounce[i]
		}
	}
	return nil
}

// untrustedAccept turns an accepted RCPT at an accept-then-bounce
// receiver into accept_all, unless the receiver showed it verifies
// recipients by rejecting the random address.
func untrustedAccept(c *evs.SMTPCheck, catchAll string) {
	r := bounceReceiverOf(c.Host)
	if r == nil || (catchAll == evs.SMTPRejected && !r.Always) {
		return
	}
	c.Result = evs.SMTPAcceptAll
	if r.Always {
		c.Detail = r.Name + " accepts at RCPT addresses it bounces after the message, so its 250 is not proof"
	} else {
		c.Detail = r.Name + " gateway accepts at RCPT addresses it may bounce later, and the random-address probe did not show recipient verification (" + catchAll + ")"
	}
}
