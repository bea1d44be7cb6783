package verify

import (
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// untrustedAccept turns an accepted RCPT at a receiver whose 250 is not
// proof into accept_all (smtpprobe.ProviderInfo says which ones).
//
// Security gateways (Proofpoint, Mimecast, Barracuda, Cisco, Trend Micro)
// sit in front of the real mail store. With recipient verification off
// (or deferred, as Mimecast's default 451 for unknown internal users) they
// take every RCPT and the store bounces later; with it on, they reject
// unknown addresses at RCPT. So for a gateway a rejected random address
// shows that verification is on and the 250 can be trusted, while a
// greylisted, timed-out or otherwise inconclusive random address leaves
// the 250 meaningless.
//
// Yahoo and AOL document bounces for non-existent users sent after the
// message ("554 delivery error: dd This user doesn't have a yahoo.com
// account"), so their 250 at RCPT is never proof.
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
