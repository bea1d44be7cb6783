package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Reported outcomes (store.Outcomes), keyed by account, normalised
// address, time and kind, so a report sent twice is kept once (an expired
// row not yet swept is replaced). verdict and score are the account's last
// verdict on the address when the outcome came ("" and -1 for none), for
// GET /v1/outcomes/report.
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
// row per account, address and class (evs.DomainClass), made by the first
// outcome of that class (or the first after the last expired), kept until
// it expires; shared (a later column) says whether it counts across
// accounts (store.SharesOutcome). outcome_domains holds the counts per
// account, domain and bucket (store.DomainBucket, epoch ms), shared_* the
// shared marks alone; both change in the transaction of their outcomes.
// The migration counts the outcomes stored before it; the domain is what
// follows an address's last "@" (rtrim with every character but "@").
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
	// A row qMarkOutcome adds is an address counted anew; when one is
	// there, qUnmarkExpired deletes it if it expired (not yet swept), to
	// be uncounted and made anew.
	qUnmarkExpired = `DELETE FROM outcome_marks WHERE account_id = ? AND address = ? AND class = ? AND expires_at <= ? RETURNING class, expires_at, shared`
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
	qDomainCounts        = `SELECT domain, sum(delivered), sum(hard_bounces), min(bucket) FROM outcome_domains WHERE account_id = ? AND bucket > ? AND domain IN `
	qSharedDomainCounts  = `SELECT domain, sum(shared_delivered), sum(shared_hard_bounces), min(bucket) FROM outcome_domains WHERE bucket > ? AND domain IN `
	qGroupDomain         = ` GROUP BY domain`
	qSweepOutcomeDomains = `DELETE FROM outcome_domains WHERE bucket <= ?`
)

// uncount uncounts in deltas each mark of address that a DELETE deleted,
// expired ones too: their buckets may still be read. rows are its
// RETURNING class, expires_at, shared; err is its own.
func uncount(rows *sql.Rows, err error, deltas store.DomainDeltas, address, op string) error {
	return eachRow(rows, err, op, func(rows *sql.Rows) error {
		var (
			class   string
			expires int64
			shared  bool
		)
		if err := rows.Scan(&class, &expires, &shared); err != nil {
			return dbErr(op, err)
		}
		deltas.Add(address, class, time.UnixMilli(expires), -1, shared)
		return nil
	})
}

// writeDeltas applies the deltas to the account's rows, but for buckets
// already ended (an expired mark deleted before the sweep): those are
// never read again.
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
	outcomeColumns   = `address, at, kind, bounce_type, smtp_reply, verdict, score, expires_at`
	qAddressOutcomes = `SELECT ` + outcomeColumns + ` FROM outcomes WHERE account_id = ? AND expires_at > ? AND address IN `
	outcomeChunk     = 500 // addresses per query, well under SQLite's limit of parameters
	qAccountOutcomes = `SELECT ` + outcomeColumns + ` FROM outcomes WHERE account_id = ? AND expires_at > ?`
	qDeleteOutcomes  = `DELETE FROM outcomes WHERE account_id = ? AND address = ?`
	qSweepOutcomes   = `DELETE FROM outcomes WHERE expires_at <= ?`
	qLastVerdicts    = `SELECT decision FROM result_cache WHERE account_id = ? AND address = ?`
	outcomeNoScore   = -1
)

// PutOutcomes stores the account's new outcomes in one transaction.
func (s *Store) PutOutcomes(ctx context.Context, accountID string, os []evs.Outcome, expiresAt time.Time) (int, error) {
	if len(os) == 0 {
		return 0, nil
	}
	// Marked before (a read between the commit and the mark must not
	// miss them) and after (a filter rebuilt meanwhile reads them).
	s.markOutcomes(accountID, os)
	added := 0
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		added = 0 // a retried transaction counts again
		// Statements of tx: they close with it.
		st, err1 := s.wstmt(ctx, tx, qPutOutcome)
		mark, err2 := s.wstmt(ctx, tx, qMarkOutcome)
		unmark, err3 := s.wstmt(ctx, tx, qUnmarkExpired)
		if err := errors.Join(err1, err2, err3); err != nil {
			return dbErr("store outcomes", err)
		}
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
				shared := store.SharesOutcome(o)
				m, err := changed(mark.ExecContext(ctx, accountID, o.Address, class, millis(expiresAt), shared))
				if err == nil && m == 0 {
					// A mark is there (most addresses have none yet): an
					// expired one is uncounted and made anew.
					rows, qerr := unmark.QueryContext(ctx, accountID, o.Address, class, now)
					if err := uncount(rows, qerr, deltas, o.Address, "count outcomes by domain"); err != nil {
						return err
					}
					m, err = changed(mark.ExecContext(ctx, accountID, o.Address, class, millis(expiresAt), shared))
				}
				if err != nil {
					return dbErr("count outcomes by domain", err)
				}
				if m > 0 {
					deltas.Add(o.Address, class, expiresAt, 1, shared)
				}
			}
		}
		return writeDeltas(ctx, tx, deltas, accountID, now)
	})
	s.memo.forget()
	if err != nil {
		return 0, err
	}
	s.markOutcomes(accountID, os)
	return added, nil
}

// qOutcomeScopes selects the outcome filter's scopes: "account address",
// "account @domain" (counts) and " @domain" (shared counts), which never
// meet: an account ID has no space, an address does not start with "@".
const qOutcomeScopes = `SELECT account_id || ' ' || address FROM outcomes
	UNION ALL SELECT account_id || ' @' || domain FROM outcome_domains
	UNION ALL SELECT ' @' || domain FROM outcome_domains WHERE shared_delivered > 0 OR shared_hard_bounces > 0`

// markOutcomes marks in the outcome filter, if any, the addresses of os
// and the counts of their domains.
func (s *Store) markOutcomes(accountID string, os []evs.Outcome) {
	if s.outcomes == nil {
		return
	}
	for _, o := range os {
		dom := evs.AddressDomain(o.Address)
		s.outcomes.add(accountID, " ", o.Address)
		s.outcomes.add(accountID, " @", dom)
		if store.SharesOutcome(o) {
			s.outcomes.add(" @", dom)
		}
	}
}

// rquery runs a reader query, prepared at Open when it is one of
// readerQueries.
func (s *Store) rquery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st, ok := s.rstmts.m[q]; ok {
		return st.QueryContext(ctx, args...)
	}
	return s.rdb.QueryContext(ctx, q, args...)
}

// history returns the history of each of keys whose scope (owner+sep+key)
// has any: on the directory's server the outcome filter and the memo answer
// most, the rest is read a chunk of keys at a time with read (now, epoch
// ms, the time of the read), which returns what it found by key. Every key
// read is remembered, one that has nothing until a write adds some.
func (s *Store) history(owner, sep string, keys []string, read func(chunk []string, now int64) (map[string]memoEntry, error)) (map[string]memoEntry, error) {
	now, gen := millis(s.now()), s.memo.generation()
	var out map[string]memoEntry
	var ask []string
	for _, k := range keys {
		if s.outcomes != nil && !s.outcomes.mayHave(owner, sep, k) {
			continue
		}
		if e, ok := s.memo.get(owner+sep+k, now); !ok {
			ask = append(ask, k)
		} else if len(e.outcomes) > 0 || !e.counts.Zero() {
			setIn(&out, k, e)
		}
	}
	for chunk := range slices.Chunk(ask, outcomeChunk) {
		found, err := read(chunk, now)
		if err != nil {
			return nil, err
		}
		for _, k := range chunk {
			e, ok := found[k]
			if e.gen = gen; ok {
				setIn(&out, k, e)
			} else {
				e.until = math.MaxInt64
			}
			s.memo.put(owner+sep+k, e)
		}
	}
	return out, nil
}

// AddressOutcomes returns the account's unexpired outcomes of each address
// (store.Outcomes), from history.
func (s *Store) AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error) {
	got, err := s.history(accountID, " ", addresses, func(chunk []string, now int64) (map[string]memoEntry, error) {
		list, args := inList(chunk, accountID, now)
		rows, err := s.rquery(ctx, qAddressOutcomes+list, args...)
		found := map[string]memoEntry{}
		return found, scanOutcomes(rows, err, func(o evs.Outcome, expires int64) error {
			e := found[o.Address]
			e.outcomes, e.until = append(e.outcomes, o), min(cmp.Or(e.until, expires), expires)
			found[o.Address] = e
			return nil
		})
	})
	var out map[string][]evs.Outcome
	for a, e := range got {
		setIn(&out, a, e.outcomes)
	}
	return out, err
}

// inList returns the SQL list of one placeholder per item of xs, "(?, ?)",
// and args followed by xs: the arguments of a query that ends with it.
func inList(xs []string, args ...any) (string, []any) {
	for _, x := range xs {
		args = append(args, x)
	}
	return `(?` + strings.Repeat(`, ?`, len(xs)-1) + `)`, args
}

// DeleteOutcomes deletes the account's outcomes of address.
func (s *Store) DeleteOutcomes(ctx context.Context, accountID, address string) (int, error) {
	var n int
	err := s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		k, err := changed(tx.ExecContext(ctx, qDeleteOutcomes, accountID, address))
		if err != nil {
			return dbErr("delete outcomes", err)
		}
		n = int(k)
		deltas := store.DomainDeltas{}
		rows, err := tx.QueryContext(ctx, qDeleteMarks, accountID, address)
		if err := uncount(rows, err, deltas, address, "delete outcomes"); err != nil {
			return err
		}
		return writeDeltas(ctx, tx, deltas, accountID, millis(s.now()))
	})
	s.memo.forget()
	return n, err
}

// EachOutcome calls fn with each unexpired outcome, in one read transaction.
func (s *Store) EachOutcome(ctx context.Context, accountID string, fn func(evs.Outcome) error) error {
	rows, err := s.rdb.QueryContext(ctx, qAccountOutcomes, accountID, millis(s.now()))
	return scanOutcomes(rows, err, func(o evs.Outcome, _ int64) error { return fn(o) })
}

// scanOutcomes calls fn with each row of a query's rows (err is the
// query's own), and when it expires, and closes them.
func scanOutcomes(rows *sql.Rows, err error, fn func(o evs.Outcome, expires int64) error) error {
	return eachRow(rows, err, "read outcomes", func(rows *sql.Rows) error {
		var (
			o           evs.Outcome
			at, expires int64
			kind        string
			verdict     string
		)
		if err := rows.Scan(&o.Address, &at, &kind, &o.BounceType, &o.SMTPReply, &verdict, &o.Score, &expires); err != nil {
			return dbErr("read outcomes", err)
		}
		o.At, o.Kind, o.Verdict = time.UnixMilli(at).UTC(), evs.OutcomeKind(kind), evs.Status(verdict)
		if o.Verdict == "" {
			o.Score = 0
		}
		return fn(o, expires)
	})
}

// LastVerdicts returns each address's latest cached decision, in either mode.
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
	st, err := tx.PrepareContext(ctx, qLastVerdicts) // closed with tx
	if err != nil {
		return nil, dbErr("read the result cache", err)
	}
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
// domain that has any (store.Outcomes), from history: the account's rows,
// or with shared every account's, of buckets not yet ended.
func (s *Store) DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error) {
	owner, q := accountID, qDomainCounts // owner of the counts: "" for the shared
	if shared {
		owner, q = "", qSharedDomainCounts
	}
	got, err := s.history(owner, " @", domains, func(chunk []string, now int64) (map[string]memoEntry, error) {
		// Made here, on a read: most calls are answered without one.
		first := []any{now}
		if !shared {
			first = []any{accountID, now}
		}
		list, args := inList(chunk, first...)
		rows, err := s.rquery(ctx, q+list+qGroupDomain, args...)
		found := map[string]memoEntry{}
		return found, eachRow(rows, err, "read domain counts", func(rows *sql.Rows) error {
			var d string
			var e memoEntry
			if err := rows.Scan(&d, &e.counts.Delivered, &e.counts.HardBounces, &e.until); err != nil {
				return dbErr("read domain counts", err)
			}
			if !e.counts.Zero() {
				found[d] = e
			}
			return nil
		})
	})
	var out map[string]evs.DomainCounts
	for d, e := range got {
		setIn(&out, d, e.counts)
	}
	return out, err
}

// setIn sets (*m)[k], making *m first if it is nil: a read that finds
// nothing makes no map.
func setIn[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// historyMemo keeps, on the directory's server, the history last read by
// the outcome filter's scopes (an address's outcomes, a domain's counts).
// History changes only by this process's writes, each of which moves the
// generation and so forgets every entry, and with time: an entry lasts
// until its first outcome expires or its first bucket of counts ends.
type historyMemo struct {
	gen atomic.Int64
	lru *lru.Cache[string, memoEntry]
}

// memoEntry is one scope's history, read at generation gen, good until
// until (epoch ms). Its outcomes are shared: no reader changes them.
type memoEntry struct {
	outcomes   []evs.Outcome
	counts     evs.DomainCounts
	gen, until int64
}

func newHistoryMemo() *historyMemo {
	c, _ := lru.New[string, memoEntry](8192) // errs only for size <= 0
	return &historyMemo{lru: c}
}

// generation is the memo's generation (0 without one).
func (m *historyMemo) generation() int64 {
	if m == nil {
		return 0
	}
	return m.gen.Load()
}

// forget forgets every entry: outcomes were written.
func (m *historyMemo) forget() {
	if m != nil {
		m.gen.Add(1)
	}
}

func (m *historyMemo) get(scope string, now int64) (memoEntry, bool) {
	if m == nil {
		return memoEntry{}, false
	}
	e, ok := m.lru.Get(scope)
	return e, ok && e.gen == m.gen.Load() && now < e.until
}

// put keeps e, read at generation e.gen: a write since then makes it one
// that get never answers.
func (m *historyMemo) put(scope string, e memoEntry) {
	if m != nil {
		m.lru.Add(scope, e)
	}
}
