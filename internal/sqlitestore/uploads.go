package sqlitestore

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/url"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Uploads are kept in the database, so a backup holds them too. The list
// arrives as parts of uploadPart bytes, each its own short write: a slow
// 100 MiB PUT never holds the writer for longer than one part. Parts are
// written under a random attempt number and the upload names the attempt
// that finished last, so a PUT cut off, or two at once, never mix lists.
const uploadPart = 1 << 20

// openUploadsQuery counts an account's open uploads and finds when the
// oldest expires.
const openUploadsQuery = `SELECT COUNT(*), COALESCE(MIN(expires_at), 0) FROM uploads
	WHERE account_id = ? AND dropped = 0 AND expires_at > ?`

// CreateUpload records u with a fresh token and returns the URL the
// client sends the list to: origin + /v1/uploads/{id}?token=..., answered
// by ReceiveUpload. Writes are serialised, so maxOpen is never exceeded.
func (s *Store) CreateUpload(ctx context.Context, u evs.Upload, origin string, maxOpen int) (string, error) {
	token, hash, err := newToken()
	if err != nil {
		return "", err
	}
	err = s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		if maxOpen > 0 {
			now := s.now()
			var n int
			var oldest int64
			if err := tx.QueryRowContext(ctx, openUploadsQuery, u.AccountID, millis(now)).Scan(&n, &oldest); err != nil {
				return dbErr("count open uploads", err)
			}
			if n >= maxOpen {
				return store.OpenUploadsLimit(n, fromMillis(oldest), now)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO uploads (id, account_id, content_type, token_hash, created_at, expires_at, max_bytes)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, u.ID, u.AccountID, u.ContentType, hash, millis(u.CreatedAt), millis(u.ExpiresAt), u.MaxBytes)
		return dbErr("create upload", err)
	})
	if err != nil {
		return "", err
	}
	return origin + "/v1/uploads/" + url.PathEscape(u.ID) + "?token=" + token, nil
}

// newToken returns a random token for a URL (an upload's, an export's)
// and its hash, the only part kept.
func newToken() (token string, hash []byte, err error) {
	var tok [32]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", nil, err
	}
	token = base64.RawURLEncoding.EncodeToString(tok[:])
	sum := sha256.Sum256([]byte(token))
	return token, sum[:], nil
}

// tokenIs tells, in constant time, whether token is the one of hash.
func tokenIs(token string, hash []byte) bool {
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], hash) == 1
}

type uploadRow struct {
	u       evs.Upload
	hash    []byte
	size    sql.NullInt64
	attempt int64
	dropped bool
}

func (s *Store) upload(ctx context.Context, id string) (uploadRow, error) {
	var (
		r                uploadRow
		created, expires int64
	)
	err := s.rdb.QueryRowContext(ctx, `SELECT account_id, content_type, token_hash, created_at, expires_at, max_bytes, size, attempt, dropped
		FROM uploads WHERE id = ? AND expires_at > ?`, id, millis(s.now())).
		Scan(&r.u.AccountID, &r.u.ContentType, &r.hash, &created, &expires, &r.u.MaxBytes, &r.size, &r.attempt, &r.dropped)
	if err != nil {
		return uploadRow{}, rowErr(err, "read upload", store.NoUpload)
	}
	r.u.ID, r.u.CreatedAt, r.u.ExpiresAt = id, fromMillis(created), fromMillis(expires)
	return r, nil
}

// ReceiveUpload stores what open returns as the list of upload id, if
// token is the upload's and contentType the one it was made for. It
// answers CodeNotFound for an unknown or expired upload or a wrong token,
// CodeInvalidRequest for another content type, CodePayloadTooLarge past
// MaxBytes, CodeInvalidState once a batch was made from it, and an
// *evs.Error of the reader's own as it is. A second PUT replaces the first.
func (s *Store) ReceiveUpload(ctx context.Context, id, token, contentType string, open func(evs.Upload) io.Reader) (evs.Upload, int64, error) {
	r, err := s.upload(ctx, id)
	if err != nil {
		return evs.Upload{}, 0, err
	}
	if !tokenIs(token, r.hash) {
		return evs.Upload{}, 0, store.NoUpload()
	}
	if r.dropped {
		return evs.Upload{}, 0, evs.Errorf(evs.CodeInvalidState, "The upload was already used to create a request.")
	}
	if contentType != r.u.ContentType {
		return evs.Upload{}, 0, evs.Errorf(evs.CodeInvalidRequest, "Content-Type must be %s, as the upload was made for.", r.u.ContentType)
	}
	var ab [8]byte
	if _, err := rand.Read(ab[:]); err != nil {
		return evs.Upload{}, 0, err
	}
	attempt := int64(binary.LittleEndian.Uint64(ab[:]) >> 1)
	forget := func() {
		// Best effort: what is left expires with the upload.
		_ = s.writeOne(context.WithoutCancel(ctx), false, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM upload_parts WHERE upload = ? AND attempt = ?`, id, attempt)
			return err
		})
	}
	size, rerr, err := eachPart(open(r.u), func(n int, part []byte, size int64) error {
		if size > r.u.MaxBytes {
			return evs.Errorf(evs.CodePayloadTooLarge, "The upload is larger than %d bytes.", r.u.MaxBytes)
		}
		return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO upload_parts (upload, attempt, n, data) VALUES (?, ?, ?, ?)`, id, attempt, n, part)
			return dbErr("store upload part", err)
		})
	})
	// A read's *evs.Error is the body's own refusal (a quota).
	if _, own := errors.AsType[*evs.Error](rerr); rerr != nil && !own {
		rerr = evs.Wrap(rerr, evs.CodeInvalidRequest, "The upload's body did not arrive whole; send it again.")
	}
	if err = cmp.Or(err, rerr); err != nil {
		forget()
		return evs.Upload{}, 0, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE uploads SET size = ?, attempt = ? WHERE id = ? AND dropped = 0 AND expires_at > ?`,
			size, attempt, id, millis(s.now()))
		if err != nil {
			return dbErr("finish upload", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return evs.Errorf(evs.CodeInvalidState, "The upload expired or was used while it was being sent.")
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM upload_parts WHERE upload = ? AND attempt != ?`, id, attempt)
		return dbErr("finish upload", err)
	})
	if err != nil {
		forget()
		return evs.Upload{}, 0, err
	}
	return r.u, size, nil
}

// OpenUpload returns the upload and its list, read a part at a time.
func (s *Store) OpenUpload(ctx context.Context, accountID, id string) (evs.Upload, io.ReadCloser, int64, error) {
	r, err := s.upload(ctx, id)
	if err != nil {
		return evs.Upload{}, nil, 0, err
	}
	switch {
	case r.u.AccountID != accountID:
		return evs.Upload{}, nil, 0, store.NoUpload()
	case r.dropped:
		return evs.Upload{}, nil, 0, evs.Errorf(evs.CodeInvalidState, "The upload was already used to create a request.")
	case !r.size.Valid:
		return evs.Upload{}, nil, 0, store.NothingUploaded()
	}
	return r.u, &partReader{part: func(n int) (data []byte, err error) {
		err = s.rdb.QueryRowContext(ctx, `SELECT data FROM upload_parts WHERE upload = ? AND attempt = ? AND n = ?`,
			id, r.attempt, n).Scan(&data)
		return data, dbErr("read upload part", err)
	}}, r.size.Int64, nil
}

// DropUpload deletes the upload's list and marks it used; the record stays
// until it expires, so a later PUT is refused.
func (s *Store) DropUpload(ctx context.Context, accountID, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE uploads SET dropped = 1 WHERE id = ? AND account_id = ?`, id, accountID); err != nil {
			return dbErr("drop upload", err)
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM upload_parts WHERE upload = ?`, id)
		return dbErr("drop upload", err)
	})
}

// eachPart calls write with each part of up to uploadPart bytes that r
// gives, numbered from 0, and the size so far; it returns the size, r's
// fault (its end is none) and write's.
func eachPart(r io.Reader, write func(n int, part []byte, size int64) error) (size int64, rerr, werr error) {
	buf := make([]byte, uploadPart)
	for n := 0; ; n++ {
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			size += int64(k)
			if werr = write(n, buf[:k], size); werr != nil {
				return size, nil, werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return size, nil, nil
		}
		if err != nil {
			return size, err, nil
		}
	}
}

// partReader reads the parts of an upload, or of a batch's rows, in
// order: part(n) reads part n, and fails with sql.ErrNoRows past the
// last.
type partReader struct {
	part func(n int) ([]byte, error)
	n    int
	cur  []byte
	done bool
}

func (p *partReader) fill() error {
	cur, err := p.part(p.n)
	if errors.Is(err, sql.ErrNoRows) {
		p.done = true
		return nil
	}
	if err != nil {
		return err
	}
	p.cur, p.n = cur, p.n+1
	return nil
}

func (p *partReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.done {
			return 0, io.EOF
		}
		if err := p.fill(); err != nil {
			return 0, err
		}
	}
	k := copy(b, p.cur)
	p.cur = p.cur[k:]
	return k, nil
}

func (p *partReader) Close() error { return nil }

const uploadsSchema = `
CREATE TABLE uploads (
	id           TEXT PRIMARY KEY,
	account_id   TEXT NOT NULL,
	content_type TEXT NOT NULL,
	token_hash   BLOB NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	max_bytes    INTEGER NOT NULL,
	size         INTEGER,
	attempt      INTEGER NOT NULL DEFAULT 0,
	dropped      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX uploads_expires ON uploads (expires_at);

CREATE TABLE upload_parts (
	upload  TEXT NOT NULL REFERENCES uploads (id) ON DELETE CASCADE,
	attempt INTEGER NOT NULL,
	n       INTEGER NOT NULL,
	data    BLOB NOT NULL,
	PRIMARY KEY (upload, attempt, n)
) WITHOUT ROWID;
`

// openUploadsSchema indexes each account's open uploads for CreateUpload's
// count.
const openUploadsSchema = `
CREATE INDEX uploads_open ON uploads (account_id, expires_at) WHERE dropped = 0;
`
