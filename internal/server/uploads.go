package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// uploadStore is a store that receives uploads' lists itself: `evs serve`
// then serves the URLs POST /v1/uploads hands out.
type uploadStore interface {
	api.Uploads
	// ReceiveUpload stores the list of upload id, read from what body
	// returns for the upload once its token is checked.
	ReceiveUpload(ctx context.Context, id, token, contentType string, body func(evs.Upload) io.Reader) (evs.Upload, int64, error)
}

// uploadRoute is the route template of an upload's URL, in logs and
// metrics. It is no API Gateway route: on AWS the URL is S3's.
const uploadRoute = "/v1/uploads/{id}"

// uploadTimeout is how long an upload's body may take to arrive: 100 MiB
// at a little over 170 KiB/s.
const uploadTimeout = 10 * time.Minute

// UploadMinRate is the slowest an upload's body may arrive, in bytes a
// second, over each window of Options.UploadWindow: a client that sends a
// little now and then holds its connection for one window only.
const UploadMinRate = 16 << 10

// defaultUploadWindow is Options.UploadWindow's default.
const defaultUploadWindow = 10 * time.Second

// rateBody moves the connection's read deadline on by a window each time a
// window's worth of bytes has arrived, never past the body's last
// deadline: a body slower than UploadMinRate over a window times out.
type rateBody struct {
	io.Reader
	rc     *http.ResponseController
	window time.Duration
	need   int       // bytes a window must bring
	got    int       // bytes since the window began
	last   time.Time // the body's last deadline
	// slow: a read timed out, the body arrived too slowly.
	slow bool
}

func newRateBody(r io.Reader, rc *http.ResponseController, window time.Duration, last time.Time) *rateBody {
	b := &rateBody{Reader: r, rc: rc, window: window, need: int(UploadMinRate * window / time.Second), last: last}
	b.next()
	return b
}

// next starts a window.
func (b *rateBody) next() {
	b.got = 0
	d := time.Now().Add(b.window)
	if d.After(b.last) {
		d = b.last
	}
	_ = b.rc.SetReadDeadline(d)
}

func (b *rateBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if b.got += n; b.got >= b.need {
		b.next()
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		b.slow = true
	}
	return n, err
}

// receiveUpload answers PUT on an upload's URL, whose token is the
// credential (a wrong one counts as a failed authentication).
func (g *edge) receiveUpload(w http.ResponseWriter, r *http.Request) {
	c, id := routed(r, uploadRoute), r.PathValue("id")
	rid := c.RequestID
	fail := func(err error) { writeCallError(w, r, c, err) }
	client, ok := g.admitTokenCall(w, r, c, http.MethodPut)
	if !ok {
		return
	}
	if g.lowOnSpace() {
		defer refuseEarly(w, r)()
		writeLowSpace(w, rid)
		return
	}
	if r.ContentLength > evs.UploadMaxBytes {
		w.Header().Set("Connection", "close")
		fail(evs.Errorf(evs.CodePayloadTooLarge, "The upload is larger than %d bytes.", evs.UploadMaxBytes))
		return
	}
	if _, busy := g.receiving.LoadOrStore(id, struct{}{}); busy {
		w.Header().Set("Connection", "close")
		fail(evs.Errorf(evs.CodeInvalidState, "This upload's list is being sent by another request; wait for it to end, then send again if needed."))
		return
	}
	defer g.receiving.Delete(id)
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		ct = ""
	}
	window := cmp.Or(g.o.UploadWindow, defaultUploadWindow)
	body := newRateBody(r.Body, http.NewResponseController(w), window, time.Now().Add(uploadTimeout))
	// The list counts against the account's storage quota as it arrives;
	// one stopped midway is forgotten, and its charge given back.
	var held *api.Hold
	var hr *api.HeldReader
	u, size, err := g.uploads.ReceiveUpload(r.Context(), id, r.URL.Query().Get("token"), ct, func(u evs.Upload) io.Reader {
		p := evs.Principal{AccountID: u.AccountID}
		if a, err := g.o.Store.Account(r.Context(), u.AccountID); err == nil {
			p.Test = a.Test
		}
		held = api.NewHold(g.ledger, p, u.ExpiresAt)
		hr = held.Reader(r.Context(), body)
		return hr
	})
	if held != nil && err != nil {
		held.Undo(r.Context())
		err = hr.Refusal(err)
	} else if held != nil {
		held.Done(r.Context())
	}
	if err != nil {
		switch code := evs.ErrorCode(err); {
		case body.slow:
			// The request's context ends with its connection: what the
			// store said after that is no news. The body was too slow.
			err = evs.Errorf(evs.CodeInvalidRequest, "The upload arrived slower than %d KiB/s over %v, or took longer than %v; send it again.",
				UploadMinRate>>10, window, uploadTimeout)
		case code == evs.CodeNotFound:
			g.fails.fail(client, g.o.Now())
		case code == evs.CodeInternal && (r.Context().Err() != nil || errors.Is(err, io.ErrUnexpectedEOF)):
			// The client stopped sending (it closed the connection before
			// the body's end): its doing, not a fault of ours to log as one.
			err = evs.Errorf(evs.CodeInvalidRequest, "The upload ended before the whole body arrived; send it again.")
		}
		if evs.ErrorCode(err) != evs.CodeNotFound {
			// Whatever was not read is never read: close the connection
			// rather than drain up to 100 MiB.
			w.Header().Set("Connection", "close")
		}
		fail(err)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	c.AccountID = u.AccountID
	b, _ := json.Marshal(struct {
		RequestID string `json:"requestId"`
		UploadID  string `json:"uploadId"`
		Bytes     int64  `json:"bytes"`
	}{rid, id, size})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
