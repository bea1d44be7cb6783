package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// Backup writes a consistent copy (VACUUM INTO, one snapshot) of the
// database in the data directory dir to dest/evs.db while other processes
// go on using dir. dest must not exist or be an empty directory; it is
// created 0700, the copy 0600, and is then a data directory `evs serve` can
// start on. The copy keeps dir's schema version and has a temporary name
// until it is complete and synced.
func Backup(ctx context.Context, dir, dest string) error {
	src := filepath.Join(dir, FileName)
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("sqlitestore: no database to back up in %s: %w", dir, err)
	}
	if err := emptyDir(dest); err != nil {
		return err
	}
	// A server that stopped uncleanly left writes in its log; one without
	// that log lost them, and a copy of it would lack them too.
	if err := checkWAL(dir, openBackup); err != nil {
		return err
	}
	// Read-only: a connection that may write would, as the last to close,
	// copy the log into evs.db and delete it, and a crashed server's
	// marker (RunningName) would then outlive its log.
	abs, err := filepath.Abs(src)
	if err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", src, err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String())
	if err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", src, err)
	}
	db.SetMaxOpenConns(1)
	err = vacuumInto(ctx, db, filepath.Join(dest, FileName))
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sqlitestore: close %s: %w", src, cerr)
	}
	return err
}

// emptyDir makes dest a new private directory, or accepts an existing
// empty one: a backup never mixes with, or overwrites, other files.
func emptyDir(dest string) error {
	entries, err := os.ReadDir(dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dest, 0o700); err != nil {
			return fmt.Errorf("sqlitestore: create %s: %w", dest, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("sqlitestore: the backup destination %s: %w", dest, err)
	case len(entries) > 0:
		return fmt.Errorf("sqlitestore: the backup destination %s is not empty: name a new directory", dest)
	}
	return nil
}

// vacuumInto writes a consistent copy of db's database to path: to a
// temporary file made 0600 before SQLite writes a byte, then synced (VACUUM
// INTO does not) and renamed, so path is either absent or a whole copy.
func vacuumInto(ctx context.Context, db *sql.DB, path string) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".partial-*")
	if err != nil {
		return fmt.Errorf("sqlitestore: copy the database: %w", err)
	}
	name := tmp.Name()
	tmp.Close()
	defer func() {
		if err != nil {
			os.Remove(name)
		}
	}()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, name); err != nil {
		return dbErr("copy the database to "+path, err)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sqlitestore: copy the database: %w", err)
	}
	err = cmp.Or(f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(name, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: copy the database to %s: %w", path, err)
	}
	return nil
}

// PreMigrationName is the copy of the database that Open keeps in the data
// directory before it migrates a database of schema version v.
func PreMigrationName(v int) string { return fmt.Sprintf("%s.v%d.bak", FileName, v) }

// prepareMigration readies a database whose schema is older than this
// program's for migrate. A process that does not serve migrates only under
// the serve lock (held until release), never beneath a running, perhaps
// older, server. A database that holds data is first copied beside itself
// (PreMigrationName): a migration cannot be undone.
func (s *Store) prepareMigration(ctx context.Context, serving bool) (release func(), err error) {
	release = func() {}
	v, err := s.schemaVersion(ctx)
	if err != nil || v >= len(migrations) {
		// Newer than this program: migrate refuses it.
		return release, err
	}
	if !serving && v > 0 {
		// A new database (v 0) is left to migrate's transaction: a server
		// holding the lock is then creating the same tables.
		lock, err := lockDir(s.dir)
		if errors.Is(err, ErrInUse) {
			return release, kindError{fmt.Sprintf("the database in %s has schema version %d and this evs needs version %d, but an evs serve is running on it, "+
				"and migrating it under that server could break it: use the evs that server runs, or stop it and start this evs's serve, "+
				"which migrates the database (keeping a copy of the old one)", s.dir, v, len(migrations)), ErrInUse}
		}
		if err != nil {
			return release, err
		}
		if lock != nil {
			release = func() { lock.Close() }
		}
		// Read again under the lock: a server may have migrated it since.
		if v, err = s.schemaVersion(ctx); err != nil {
			release()
			return func() {}, err
		}
	}
	if v > 0 && v < len(migrations) {
		if err := vacuumInto(ctx, s.db, filepath.Join(s.dir, PreMigrationName(v))); err != nil {
			release()
			return func() {}, fmt.Errorf("sqlitestore: keep a copy of the database before migrating it from schema version %d: %w", v, err)
		}
	}
	return release, nil
}

func (s *Store) schemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.rdb.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, dbErr("read schema version", err)
}
