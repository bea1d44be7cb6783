package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] moves the schema from user_version i to i+1. Append only:
// a released migration never changes, since databases in the field already
// ran it.
var migrations = []string{
	`
CREATE TABLE accounts (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	test       INTEGER NOT NULL,
	suspended  INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX accounts_name ON accounts (name);

CREATE TABLE keys (
	hash         TEXT PRIMARY KEY,
	id           TEXT NOT NULL UNIQUE,
	account_id   TEXT NOT NULL REFERENCES accounts (id),
	revoked      INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	revoked_at   INTEGER,
	usage_key_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX keys_account ON keys (account_id);
CREATE INDEX keys_created ON keys (created_at);

CREATE TABLE idempotency (
	scope        TEXT PRIMARY KEY,
	fingerprint  TEXT NOT NULL,
	state        TEXT NOT NULL,
	locked_until INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	status_code  INTEGER NOT NULL DEFAULT 0,
	headers      TEXT,
	body         BLOB
);
CREATE INDEX idempotency_expires ON idempotency (expires_at);

-- account_id has no foreign key: batches and accounts live in different
-- tables on DynamoDB too, and the contract does not tie them.
CREATE TABLE batches (
	id            TEXT PRIMARY KEY,
	account_id    TEXT NOT NULL,
	mode          TEXT NOT NULL,
	state         TEXT NOT NULL,
	error         TEXT NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL,
	completed_at  INTEGER,
	expires_at    INTEGER NOT NULL,
	items         INTEGER NOT NULL,
	total         INTEGER NOT NULL,
	duplicates    INTEGER NOT NULL,
	processed     INTEGER NOT NULL DEFAULT 0,
	deliverable   INTEGER NOT NULL DEFAULT 0,
	undeliverable INTEGER NOT NULL DEFAULT 0,
	risky         INTEGER NOT NULL DEFAULT 0,
	unknown       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX batches_unfinished ON batches (state) WHERE state IN ('queued', 'running');
CREATE INDEX batches_expires ON batches (expires_at);

CREATE TABLE items (
	batch_id TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
	seq      INTEGER NOT NULL,
	email    TEXT NOT NULL,
	domain   TEXT NOT NULL,
	PRIMARY KEY (batch_id, seq)
) WITHOUT ROWID;

-- A result belongs to an item, so a result for a seq the batch does not
-- have is refused, and deleting a batch's items deletes its results.
CREATE TABLE results (
	batch_id TEXT NOT NULL,
	seq      INTEGER NOT NULL,
	email    TEXT NOT NULL,
	status   TEXT NOT NULL,
	decision BLOB NOT NULL,
	PRIMARY KEY (batch_id, seq),
	FOREIGN KEY (batch_id, seq) REFERENCES items (batch_id, seq) ON DELETE CASCADE
);
CREATE INDEX results_status ON results (batch_id, status, seq);
`,
	// Version 2 halves a batch on disk: items and results refer to their
	// batch by an integer key, results are clustered on (batch, seq), a
	// status is a number (0 deliverable … 3 unknown), and a result no longer
	// repeats its item's address.
	`
CREATE TABLE batches_v2 (
	key           INTEGER PRIMARY KEY,
	id            TEXT NOT NULL UNIQUE,
	account_id    TEXT NOT NULL,
	mode          TEXT NOT NULL,
	state         TEXT NOT NULL,
	error         TEXT NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL,
	completed_at  INTEGER,
	expires_at    INTEGER NOT NULL,
	items         INTEGER NOT NULL,
	total         INTEGER NOT NULL,
	duplicates    INTEGER NOT NULL,
	processed     INTEGER NOT NULL DEFAULT 0,
	deliverable   INTEGER NOT NULL DEFAULT 0,
	undeliverable INTEGER NOT NULL DEFAULT 0,
	risky         INTEGER NOT NULL DEFAULT 0,
	unknown       INTEGER NOT NULL DEFAULT 0
);
INSERT INTO batches_v2 (id, account_id, mode, state, error, created_at, completed_at, expires_at,
	items, total, duplicates, processed, deliverable, undeliverable, risky, unknown)
	SELECT id, account_id, mode, state, error, created_at, completed_at, expires_at,
	items, total, duplicates, processed, deliverable, undeliverable, risky, unknown
	FROM batches ORDER BY created_at, id;

CREATE TABLE items_v2 (
	batch  INTEGER NOT NULL REFERENCES batches_v2 (key) ON DELETE CASCADE,
	seq    INTEGER NOT NULL,
	email  TEXT NOT NULL,
	domain TEXT NOT NULL,
	PRIMARY KEY (batch, seq)
) WITHOUT ROWID;
INSERT INTO items_v2 (batch, seq, email, domain)
	SELECT b.key, i.seq, i.email, i.domain FROM items i JOIN batches_v2 b ON b.id = i.batch_id;

CREATE TABLE results_v2 (
	batch    INTEGER NOT NULL,
	seq      INTEGER NOT NULL,
	status   INTEGER NOT NULL,
	decision BLOB NOT NULL,
	PRIMARY KEY (batch, seq),
	FOREIGN KEY (batch, seq) REFERENCES items_v2 (batch, seq) ON DELETE CASCADE
) WITHOUT ROWID;
INSERT INTO results_v2 (batch, seq, status, decision)
	SELECT b.key, r.seq,
		CASE r.status WHEN 'deliverable' THEN 0 WHEN 'undeliverable' THEN 1 WHEN 'risky' THEN 2 ELSE 3 END,
		r.decision
	FROM results r JOIN batches_v2 b ON b.id = r.batch_id;

DROP TABLE results;
DROP TABLE items;
DROP TABLE batches;
ALTER TABLE batches_v2 RENAME TO batches;
ALTER TABLE items_v2 RENAME TO items;
ALTER TABLE results_v2 RENAME TO results;
CREATE INDEX batches_unfinished ON batches (state) WHERE state IN ('queued', 'running');
CREATE INDEX batches_expires ON batches (expires_at);
CREATE INDEX results_status ON results (batch, status, seq);
`,
	// Webhooks: a delivery row is written with its batch and takes effect
	// when the batch is final, so the final state and the delivery are one
	// write.
	`
CREATE TABLE deliveries (
	batch_id    TEXT PRIMARY KEY REFERENCES batches (id) ON DELETE CASCADE,
	account_id  TEXT NOT NULL,
	url         TEXT NOT NULL,
	state       TEXT NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	last_status INTEGER NOT NULL DEFAULT 0,
	next_at     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE state = 'pending';

CREATE TABLE webhook_secrets (
	account_id TEXT PRIMARY KEY,
	current    TEXT NOT NULL,
	previous   TEXT NOT NULL DEFAULT '',
	rotated_at INTEGER
) WITHOUT ROWID;
`,
	// The address quota's counters (quota.go): one row per account and
	// period, swept after expires_at.
	`
CREATE TABLE address_quota (
	account_id TEXT NOT NULL,
	period     TEXT NOT NULL,
	used       INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (account_id, period)
) WITHOUT ROWID;
`,
	// Uploads (uploads.go).
	uploadsSchema,
	// The readiness probe's one row (probe.go).
	`
CREATE TABLE write_probe (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	at INTEGER NOT NULL
);
`,
	// The stored-address limit, replaced by the byte ledger's counters
	// in address_quota (dropped below).
	`
CREATE TABLE stored_addresses (
	account_id TEXT PRIMARY KEY,
	total      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX batches_account_expires ON batches (account_id, expires_at, total);
`,
	// The result cache (resultcache.go).
	resultCacheSchema,
	// Listing an account's batches newest first (GET /v1/requests) reads
	// this index in order and stops after one page.
	`
CREATE INDEX batches_account_created ON batches (account_id, created_at DESC, id DESC);
`,
	// The cap on an account's open uploads (uploads.go).
	openUploadsSchema,
	// Batch names (contract, section 3).
	`ALTER TABLE batches ADD COLUMN name TEXT NOT NULL DEFAULT '';`,
	// Reported outcomes (outcomes.go; contract, section 18).
	outcomesSchema,
	// Publishable keys (keys.go; contract, section 17): the kind ('' for
	// secret) and the origins, space-separated.
	`
ALTER TABLE keys ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE keys ADD COLUMN origins TEXT NOT NULL DEFAULT '';
`,
	// The rows of batches made from CSV lists (rows.go).
	rowsSchema,
	// What a domain's reported outcomes teach (outcomes.go; contract,
	// section 18), counted from the outcomes already stored.
	outcomeDomainsSchema,
	`
DROP TABLE stored_addresses;
DROP INDEX batches_account_expires;
`,
	// A publishable key's own rate limits, calls a minute (0: the
	// default; keys.go).
	`
ALTER TABLE keys ADD COLUMN rate_per_address INTEGER NOT NULL DEFAULT 0;
ALTER TABLE keys ADD COLUMN rate_per_key INTEGER NOT NULL DEFAULT 0;
`,
	// Which marks count in the shared domain counts (store.SharesOutcome),
	// and the shared part of each count (outcomes.go).
	sharedMarksSchema,
	// A full-mode batch's lanes (evs.Lane, as store.LanesJSON): what its
	// estimated completion counts from.
	`ALTER TABLE batches ADD COLUMN lanes TEXT NOT NULL DEFAULT ''`,
}

// migrate brings the schema to len(migrations). It runs in one immediate
// transaction, so two processes opening a new directory at once do not both
// create the tables.
func (s *Store) migrate(ctx context.Context) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return dbErr("read schema version", err)
		}
		if v > len(migrations) {
			return fmt.Errorf("sqlitestore: database schema version %d is newer than this program's %d", v, len(migrations))
		}
		for ; v < len(migrations); v++ {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return dbErr(fmt.Sprintf("migrate schema to version %d", v+1), err)
			}
		}
		// PRAGMA takes no bound parameters.
		_, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v))
		return dbErr("write schema version", err)
	})
}
