package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Reported outcomes (contract, section 18; store.Outcomes): one row per
// account, normalised address, time and kind, the natural key, so a
// report sent twice is kept once (an expired row the sweep has not
// deleted yet is replaced, as if it were gone). verdict and score are the account's
// last verdict on the address when the outcome was received ("" and -1
// for none), for GET /v1/outcomes/report. The sweep deletes rows past
// expires_at; reads ignore them before that. They live in the same
// database file as everything else, so `evs backup` copies them.
const outcomesSchema = `
CREATE TABLE outcomes (
	account_id  TEXT NOT NULL,
	address     TEXT NOT NULL,
	at          INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	bounce_type TEXT NOT NULL DEFAULT '',
	smtp_reply  TEXT NOT NULL DEFAULT '',
	verdict     TEXT NOT NULL DEFAULT '',
	score       INTEGER NOT NULL DEFAULT -1,
	expires_at  INTEGER NOT NULL,
	PRIMARY KEY (account_id, address, at, kind)
) WITHOUT ROWID;
CREATE INDEX outcomes_expires ON outcomes (expires_at);
`

// Per-domain counts of addresses delivered to and hard-bounced
// (store.DomainCounts). outcome_marks says which addresses are counted: a
// row per account, address and class (evs.DomainClass), made by the
// first outcome of that class the account reports for the address (or
// the first after the last one expired), kept until that outcome expires;
// shared says whether it counts across accounts too (store.SharesOutcome,
// a later migration's column). outcome_domains holds the counts: one row
// per account, domain and bucket (the end of the month the mark expires
// in, store.DomainBucket, epoch ms), one more for each mark made, one
// less for each deleted with its address, and in shared_* the shared
// marks alone; read while the bucket has not ended and swept after. Both
// change in the transaction of the outcomes they follow. The index on
// domain serves the counts shared across accounts. The migration marks
// and counts the addresses of the outcomes stored before it (each by its
// earliest-expiring outcome of the class); the domain is what follows an
// address's last "@" (rtrim with every character but "@" strips back to
// it).
const outcomeDomainsSchema = `
CREATE TABLE outcome_marks (
	account_id TEXT NOT NULL,
	address    TEXT NOT NULL,
	class      TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (account_id, address, class)
) WITHOUT ROWID;
CREATE INDEX outcome_marks_expires ON outcome_marks (expires_at);
CREATE TABLE outcome_domains (
	account_id   TEXT NOT NULL,
	domain       TEXT NOT NULL,
	bucket       INTEGER NOT NULL,
	delivered    INTEGER NOT NULL DEFAULT 0,
	hard_bounces INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, domain, bucket)
) WITHOUT ROWID;
CREATE INDEX outcome_domains_domain ON outcome_domains (domain, bucket);
INSERT INTO outcome_marks (account_id, address, class, expires_at)
	SELECT account_id, address, CASE kind WHEN 'delivered' THEN 'delivered' ELSE 'hard_bounce' END, min(expires_at)
	FROM outcomes WHERE kind = 'delivered' OR (kind = 'bounced' AND bounce_type = 'hard')
	GROUP BY 1, 2, 3;
INSERT INTO outcome_domains (account_id, domain, bucket, delivered, hard_bounces)
	SELECT account_id, substr(address, length(rtrim(address, replace(address, '@', ''))) + 1),
		CAST(strftime('%s', expires_at / 1000, 'unixepoch', 'start of month', '+1 month') AS INTEGER) * 1000,
		sum(class = 'delivered'), sum(class = 'hard_bounce')
	FROM outcome_marks GROUP BY 1, 2, 3;
`

const sharedMarksSchema = `
ALTER TABLE outcome_marks ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outcome_domains ADD COLUMN shared_delivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outcome_domains ADD COLUMN shared_hard_bounces INTEGER NOT NULL DEFAULT 0;
UPDATE outcome_marks SET shared = 1 WHERE EXISTS (SELECT 1 FROM outcomes o
	WHERE o.account_id = outcome_marks.account_id AND o.address = outcome_marks.address AND o.verdict != ''
	AND CASE outcome_marks.class WHEN 'delivered' THEN o.kind = 'delivered' ELSE o.kind = 'bounced' AND o.bounce_type = 'hard' END);
INSERT INTO outcome_domains (account_id, domain, bucket, shared_delivered, shared_hard_bounces)
	SELECT account_id, substr(address, length(rtrim(address, replace(address, '@', ''))) + 1),
		CAST(strftime('%s', expires_at / 1000, 'unixepoch', 'start of month', '+1 month') AS INTEGER) * 1000,
		sum(class = 'delivered'), sum(class = 'hard_bounce')
	FROM outcome_marks WHERE shared GROUP BY 1, 2, 3
	ON CONFLICT (account_id, domain, bucket) DO UPDATE SET
		shared_delivered = excluded.shared_delivered, shared_hard_bounces = excluded.shared_hard_bounces;
`

const (
	// qUnmarkExpired deletes an expired mark the sweep has not deleted
	// yet, to be uncounted; qMarkOutcome then makes the mark of an
	// address's class unless a live one is there: a row added is an
	// address counted anew.
	qUnmarkExpired = `DELETE FROM outcome_marks WHERE account_id = ? AND address = ? AND class = ? AND expires_at <= ? RETURNING expires_at, shared`
	qMarkOutcome   = `INSERT INTO outcome_marks (account_id, address, class, expires_at, shared) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (account_id, address, class) DO NOTHING`
	qDeleteMarks     = `DELETE FROM outcome_marks WHERE account_id = ? AND address = ? RETURNING class, expires_at, shared`
	qSweepMarks      = `DELETE FROM outcome_marks WHERE expires_at <= ?`
	qAddDomainCounts = `INSERT INTO outcome_domains (account_id, domain, bucket, delivered, hard_bounces, shared_delivered, shared_hard_bounces)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (account_id, domain, bucket) DO UPDATE SET
			delivered = max(delivered + excluded.delivered, 0), hard_bounces = max(hard_bounces + excluded.hard_bounces, 0),
			shared_delivered = max(shared_delivered + excluded.shared_delivered, 0),
			shared_hard_bounces = max(shared_hard_bounces + excluded.shared_hard_bounces, 0)`
	qDomainCounts        = `SELECT domain, sum(delivered), sum(hard_bounces) FROM outcome_domains WHERE account_id = ? AND bucket > ? AND domain IN `
	qSharedDomainCounts  = `SELECT domain, sum(shared_delivered), sum(shared_hard_bounces) FROM outcome_domains WHERE bucket > ? AND domain IN `
	qSweepOutcomeDomains = `DELETE FROM outcome_domains WHERE bucket <= ?`
)

// unmarkExpired deletes the address's expired mark of class, if there is
// one, and uncounts it in deltas: its bucket may still be read.
func unmarkExpired(ctx context.Context, tx *sql.Tx, deltas store.DomainDeltas, accountID, address, class string, now int64) error {
	rows, err := tx.QueryContext(ctx, qUnmarkExpired, accountID, address, class, now)
	return eachRow(rows, err, "count outcomes by domain", func(rows *sql.Rows) error {
		var (
			expires int64
			shared  bool
		)
		if err := rows.Scan(&expires, &shared); err != nil {
			return dbErr("count outcomes by domain", err)
		}
		deltas.Add(address, class, time.UnixMilli(expires), -1, shared)
		return nil
	})
}

// writeDeltas applies the deltas to the account's rows, in tx, at the end
// of its transaction, but for buckets already ended by now (an expired
// mark deleted before the sweep): those are never read again.
func writeDeltas(ctx context.Context, tx *sql.Tx, m store.DomainDeltas, accountID string, now int64) error {
	for k, c := range m {
		if millis(k.Bucket) <= now || (c == evs.DomainCounts{}) {
			continue
		}
		var own, shared evs.DomainCounts
		if k.Shared {
			shared = c
		} else {
			own = c
		}
		if _, err := tx.ExecContext(ctx, qAddDomainCounts, accountID, k.Domain, millis(k.Bucket), own.Delivered, own.HardBounces,
			shared.Delivered, shared.HardBounces); err != nil {
			return dbErr("count outcomes by domain", err)
		}
	}
	return nil
}

const (
	qPutOutcome = `INSERT INTO outcomes (account_id, address, at, kind, bounce_type, smtp_reply, verdict, score, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (account_id, address, at, kind) DO UPDATE SET bounce_type = excluded.bounce_type,
			smtp_reply = excluded.smtp_reply, verdict = excluded.verdict, score = excluded.score, expires_at = excluded.expires_at
		WHERE outcomes.expires_at <= ?`
	outcomeColumns   = `address, at, kind, bounce_type, smtp_reply, verdict, score`
	qAnyOutcome      = `SELECT 1 FROM outcomes WHERE account_id = ? LIMIT 1`
	qAddressOutcomes = `SELECT ` + outcomeColumns + ` FROM outcomes WHERE account_id = ? AND expires_at > ? AND address IN `
	// outcomeChunk is how many addresses one query of AddressOutcomes
	// names, well under SQLite's limit of bound parameters.
	outcomeChunk     = 500
	qAccountOutcomes = `SELECT ` + outcomeColumns + ` FROM outcomes WHERE account_id = ? AND expires_at > ?`
	qDeleteOutcomes  = `DELETE FROM outcomes WHERE account_id = ? AND address = ?`
	qSweepOutcomes   = `DELETE FROM outcomes WHERE expires_at <= ?`
	qLastVerdicts    = `SELECT decision FROM result_cache WHERE account_id = ? AND address = ?`
	outcomeNoScore   = -1
)

// PutOutcomes stores the outcomes the account has not stored yet, in one
// transaction (store.Outcomes).
func (s *Store) PutOutcomes(ctx context.Context, accountID string, os []evs.Outcome, expiresAt time.Time) (int, error) {
	if len(os) == 0 {
		return 0, nil
	}
	s.reported.add(accountID)
	added := 0
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		added = 0 // a retried transaction counts again
		st, err := tx.PrepareContext(ctx, qPutOutcome)
		if err != nil {
			return dbErr("store outcomes", err)
		}
		defer st.Close()
		mark, err := tx.PrepareContext(ctx, qMarkOutcome)
		if err != nil {
			return dbErr("store outcomes", err)
		}
		defer mark.Close()
		now := millis(s.now())
		deltas := store.DomainDeltas{}
		for _, o := range os {
			score := outcomeNoScore
			if o.Verdict != "" {
				score = o.Score
			}
			n, err := changed(st.ExecContext(ctx, accountID, o.Address, millis(o.At), string(o.Kind), o.BounceType,
				o.SMTPReply, string(o.Verdict), score, millis(expiresAt), now))
			if err != nil {
				return dbErr("store outcomes", err)
			}
			added += int(n)
			if class := o.DomainClass(); n > 0 && class != "" {
				if err := unmarkExpired(ctx, tx, deltas, accountID, o.Address, class, now); err != nil {
					return err
				}
				shared := store.SharesOutcome(o)
				if m, err := changed(mark.ExecContext(ctx, accountID, o.Address, class, millis(expiresAt), shared)); err != nil {
					return dbErr("count outcomes by domain", err)
				} else if m > 0 {
					deltas.Add(o.Address, class, expiresAt, 1, shared)
				}
			}
		}
		return writeDeltas(ctx, tx, deltas, accountID, now)
	})
	if err != nil {
		return 0, err
	}
	return added, nil
}

// AddressOutcomes returns the account's unexpired outcomes of each address
// (store.Outcomes). A batch asks for every group of addresses it
// verifies, so an account that never reported outcomes costs nothing on
// the directory's server (reportedAccounts) and one probe of the primary
// key elsewhere, and one that did a query per outcomeChunk addresses.
func (s *Store) AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error) {
	out := map[string][]evs.Outcome{}
	if len(addresses) == 0 || !s.reported.has(accountID) {
		return out, nil
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbErr("begin read", err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, qAnyOutcome, accountID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return nil, dbErr("read outcomes", err)
	}
	now := millis(s.now())
	for start := 0; start < len(addresses); start += outcomeChunk {
		list, args := inList(addresses[start:min(start+outcomeChunk, len(addresses))], accountID, now)
		rows, err := tx.QueryContext(ctx, qAddressOutcomes+list, args...)
		if err := scanOutcomes(rows, err, func(o evs.Outcome) error { out[o.Address] = append(out[o.Address], o); return nil }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// inList returns the SQL list of one placeholder per item of xs, "(?, ?)",
// and args followed by xs: the arguments of a query that ends with it.
func inList(xs []string, args ...any) (string, []any) {
	for _, x := range xs {
		args = append(args, x)
	}
	return `(?` + strings.Repeat(`, ?`, len(xs)-1) + `)`, args
}

// DeleteOutcomes deletes the account's outcomes of address
// (store.Outcomes).
func (s *Store) DeleteOutcomes(ctx context.Context, accountID, address string) (int, error) {
	var n int
	err := s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		k, err := changed(tx.ExecContext(ctx, qDeleteOutcomes, accountID, address))
		if err != nil {
			return dbErr("delete outcomes", err)
		}
		n = int(k)
		// The address leaves its domain's counts with its marks, expired
		// or not: an expired mark's bucket may still be read.
		deltas := store.DomainDeltas{}
		rows, err := tx.QueryContext(ctx, qDeleteMarks, accountID, address)
		err = eachRow(rows, err, "delete outcomes", func(rows *sql.Rows) error {
			var (
				class   string
				expires int64
				shared  bool
			)
			if err := rows.Scan(&class, &expires, &shared); err != nil {
				return dbErr("delete outcomes", err)
			}
			deltas.Add(address, class, time.UnixMilli(expires), -1, shared)
			return nil
		})
		if err != nil {
			return err
		}
		return writeDeltas(ctx, tx, deltas, accountID, millis(s.now()))
	})
	return n, err
}

// EachOutcome calls fn with each of the account's unexpired outcomes
// (store.Outcomes), from one read transaction.
func (s *Store) EachOutcome(ctx context.Context, accountID string, fn func(evs.Outcome) error) error {
	rows, err := s.rdb.QueryContext(ctx, qAccountOutcomes, accountID, millis(s.now()))
	return scanOutcomes(rows, err, fn)
}

// scanOutcomes calls fn with each row of a query's rows (err is the
// query's own) and closes them.
func scanOutcomes(rows *sql.Rows, err error, fn func(evs.Outcome) error) error {
	return eachRow(rows, err, "read outcomes", func(rows *sql.Rows) error {
		var (
			o       evs.Outcome
			at      int64
			kind    string
			verdict string
		)
		if err := rows.Scan(&o.Address, &at, &kind, &o.BounceType, &o.SMTPReply, &verdict, &o.Score); err != nil {
			return dbErr("read outcomes", err)
		}
		o.At, o.Kind, o.Verdict = time.UnixMilli(at).UTC(), evs.OutcomeKind(kind), evs.Status(verdict)
		if o.Verdict == "" {
			o.Score = 0
		}
		return fn(o)
	})
}

// LastVerdicts returns the latest cached decision of each address, in
// either mode (store.Outcomes).
func (s *Store) LastVerdicts(ctx context.Context, accountID string, addresses []string) (map[string]evs.Decision, error) {
	out := map[string]evs.Decision{}
	if len(addresses) == 0 {
		return out, nil
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbErr("begin read", err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, qLastVerdicts)
	if err != nil {
		return nil, dbErr("read the result cache", err)
	}
	defer st.Close()
	for _, a := range addresses {
		rows, err := st.QueryContext(ctx, accountID, a)
		err = eachRow(rows, err, "read the result cache", func(rows *sql.Rows) error {
			var blob []byte
			if err := rows.Scan(&blob); err != nil {
				return dbErr("read the result cache", err)
			}
			d, err := store.DecodeDecision(a, blob)
			if err != nil {
				return err
			}
			if prev, ok := out[a]; !ok || d.CheckedAt.After(prev.CheckedAt.Time) {
				out[a] = d
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DomainCounts returns the deliveries and hard bounces reported for each
// domain that has any (store.Outcomes): the account's rows, or with shared
// every account's, of buckets not yet ended.
func (s *Store) DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error) {
	out := map[string]evs.DomainCounts{}
	if shared && !s.reported.any() || !shared && !s.reported.has(accountID) {
		return out, nil
	}
	now := millis(s.now())
	for start := 0; start < len(domains); start += outcomeChunk {
		q, first := qSharedDomainCounts, []any{now}
		if !shared {
			q, first = qDomainCounts, []any{accountID, now}
		}
		list, args := inList(domains[start:min(start+outcomeChunk, len(domains))], first...)
		rows, err := s.rdb.QueryContext(ctx, q+list+` GROUP BY domain`, args...)
		err = eachRow(rows, err, "read domain counts", func(rows *sql.Rows) error {
			var (
				d string
				c evs.DomainCounts
			)
			if err := rows.Scan(&d, &c.Delivered, &c.HardBounces); err != nil {
				return dbErr("read domain counts", err)
			}
			if !c.Zero() {
				out[d] = c
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
