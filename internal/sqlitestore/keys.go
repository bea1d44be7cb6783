package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Queries of this file. The hot ones (KeyByHash, Account) are prepared at
// Open on the reader pool.
const (
	qCreateAccount = `INSERT INTO accounts (id, name, test, suspended, created_at) VALUES (?, ?, ?, ?, ?)`
	qAccount       = `SELECT ` + accountCols + ` FROM accounts WHERE id = ?`
	qAccountByName = `SELECT ` + accountCols + ` FROM accounts WHERE name = ? ORDER BY created_at, id LIMIT 1`
	// qAccountTaken tells whether the ID, then the name, of a new account
	// is taken, in that order: the error DynamoDB's transaction gives.
	qAccountTaken  = `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = ?), EXISTS (SELECT 1 FROM accounts WHERE name = ?)`
	qCountAccounts = `SELECT count(*) FROM accounts`
	qCreateKey     = `INSERT INTO keys (hash, id, account_id, revoked, created_at, revoked_at, usage_key_id, kind, origins, rate_per_address, rate_per_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qKeyByHash     = `SELECT ` + keyCols + ` FROM keys WHERE hash = ?`
	qRevokeKey     = `UPDATE keys SET revoked = 1, revoked_at = coalesce(revoked_at, ?) WHERE id = ? OR hash = ? RETURNING ` + keyCols
	qListKeys      = `SELECT ` + keyCols + ` FROM keys ORDER BY created_at, hash`
	// qPing reads one page of the database: it answers while the file can
	// be read, whatever it holds.
	qPing = `SELECT count(*) FROM (SELECT 1 FROM accounts LIMIT 1)`
)

// Ping tells whether the store answers: a closed store, or a database that
// cannot be read, is an error (the health check of `evs serve`).
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return dbErr("ping", errClosed)
	}
	var n int
	return dbErr("ping", s.rstmt(qPing).QueryRowContext(ctx).Scan(&n))
}

// CreateAccount stores a new account; an existing ID or name is
// CodeInvalidState. The name is checked by a lookup in the (serialised)
// write transaction, not by a UNIQUE index, which a database written
// before names were unique, holding duplicates, could not migrate to.
func (s *Store) CreateAccount(ctx context.Context, a evs.Account) error {
	if err := store.CheckAccount(a); err != nil {
		return err
	}
	err := s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		var idTaken, nameTaken bool
		if err := tx.QueryRowContext(ctx, qAccountTaken, a.ID, a.Name).Scan(&idTaken, &nameTaken); err != nil {
			return dbErr("create account", err)
		}
		switch {
		case idTaken:
			return store.AccountExists()
		case nameTaken:
			return store.AccountNameTaken()
		}
		_, err := tx.ExecContext(ctx, qCreateAccount,
			a.ID, a.Name, a.Test, a.Suspended, millis(a.CreatedAt))
		return dbErr("create account", err)
	})
	if err != nil {
		return err
	}
	return s.keysChanged()
}

const accountCols = `id, name, test, suspended, created_at`

func scanAccount(row *sql.Row) (evs.Account, error) {
	var (
		a  evs.Account
		ms int64
	)
	if err := row.Scan(&a.ID, &a.Name, &a.Test, &a.Suspended, &ms); err != nil {
		return evs.Account{}, err
	}
	a.CreatedAt = fromMillis(ms)
	return a, nil
}

// Account returns the account with id, or CodeNotFound.
func (s *Store) Account(ctx context.Context, id string) (evs.Account, error) {
	a, err := scanAccount(s.rstmt(qAccount).QueryRowContext(ctx, id))
	return a, rowErr(err, "read account", store.NoAccount)
}

// AccountByName returns the account with that name, or CodeNotFound. Should
// several accounts share a name, the oldest is the one.
func (s *Store) AccountByName(ctx context.Context, name string) (evs.Account, error) {
	a, err := scanAccount(s.rstmt(qAccountByName).QueryRowContext(ctx, name))
	return a, rowErr(err, "read account", store.NoAccount)
}

// CountAccounts returns the number of accounts.
func (s *Store) CountAccounts(ctx context.Context) (int, error) {
	var n int
	err := s.rstmt(qCountAccounts).QueryRowContext(ctx).Scan(&n)
	return n, dbErr("count accounts", err)
}

// HasLiveAccount tells whether some account is live, not test-mode (evs
// serve checks its egress only then).
func (s *Store) HasLiveAccount(ctx context.Context) (bool, error) {
	var live bool
	err := s.rdb.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE test = 0)`).Scan(&live)
	return live, dbErr("look for a live account", err)
}

// CreateKey stores a key. An unknown account is CodeNotFound; a key whose
// hash or ID is taken is CodeInvalidState.
func (s *Store) CreateKey(ctx context.Context, k evs.Key) error {
	err := s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qCreateKey,
			k.Hash, k.ID, k.AccountID, k.Revoked, millis(k.CreatedAt), nullMillis(k.RevokedAt), k.UsageKeyID,
			string(k.Kind), strings.Join(k.Origins, " "), k.Limits.PerAddress, k.Limits.PerKey)
		switch {
		case constraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY):
			return store.NoAccount()
		case constraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY), constraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE):
			return store.KeyExists()
		}
		return dbErr("create key", err)
	})
	if err != nil {
		return err
	}
	return s.keysChanged()
}

const keyCols = `hash, id, account_id, revoked, created_at, revoked_at, usage_key_id, kind, origins, rate_per_address, rate_per_key`

type scanner interface{ Scan(dest ...any) error }

func scanKey(row scanner) (evs.Key, error) {
	var (
		k         evs.Key
		created   int64
		revokedAt sql.NullInt64
		kind      string
		origins   string
	)
	if err := row.Scan(&k.Hash, &k.ID, &k.AccountID, &k.Revoked, &created, &revokedAt, &k.UsageKeyID, &kind, &origins, &k.Limits.PerAddress, &k.Limits.PerKey); err != nil {
		return evs.Key{}, err
	}
	// An origin holds no space (authorizer.CanonicalOrigin).
	k.Kind = evs.KeyKind(kind)
	if origins != "" {
		k.Origins = strings.Fields(origins)
	}
	k.CreatedAt, k.RevokedAt = fromMillis(created), fromNullMillis(revokedAt)
	return k, nil
}

// KeyByHash returns the key with that hash, or CodeNotFound.
func (s *Store) KeyByHash(ctx context.Context, hash string) (evs.Key, error) {
	k, err := scanKey(s.rstmt(qKeyByHash).QueryRowContext(ctx, hash))
	return k, rowErr(err, "read key", store.NoKey)
}

// RevokeKey marks the key whose ID or hash is idOrHash revoked at now. A key
// revoked before keeps its first revocation time. A server running on the
// same directory refuses the key from its next call (KeysVersion).
func (s *Store) RevokeKey(ctx context.Context, idOrHash string, now time.Time) (evs.Key, error) {
	var k evs.Key
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		k, err = scanKey(tx.QueryRowContext(ctx, qRevokeKey, millis(now), idOrHash, idOrHash))
		return rowErr(err, "revoke key", store.NoKey)
	})
	if err != nil {
		return k, err
	}
	return k, s.keysChanged()
}

// ListKeys returns every key, oldest first.
func (s *Store) ListKeys(ctx context.Context) ([]evs.Key, error) {
	rows, err := s.rstmt(qListKeys).QueryContext(ctx)
	return collect(rows, err, "list keys", scanKey)
}
