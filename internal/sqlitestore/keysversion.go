package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// KeysChangedName is the file in the data directory that tells a running
// `evs serve` that another process changed keys or accounts: every store
// appends one byte to it after each such write, and the file only grows.
const KeysChangedName = "keys.changed"

// keysChanged records a committed write to keys or accounts, for this
// process (keysGen) and for a server running beside it (the file).
func (s *Store) keysChanged() error {
	s.keysGen.Add(1)
	f, err := os.OpenFile(filepath.Join(s.dir, KeysChangedName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		_, err = f.Write([]byte{'\n'})
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: the change is stored, but a running evs serve may not see it until its authorizer cache expires (EVS_AUTH_TTL): %w", err)
	}
	return nil
}

// KeysVersion returns a number that is the same on two calls only if no
// keys or accounts were changed in between, by any process on the
// directory. It costs an fstat of KeysChangedName, so the local gateway
// asks it on every call. Changes by other means (a sqlite3 shell) are not
// seen.
func (s *Store) KeysVersion(context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, dbErr("read the keys version", errClosed)
	}
	f, err := s.keysFile()
	if err != nil {
		return 0, dbErr("read the keys version", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, dbErr("read the keys version", err)
	}
	// The file grows by a byte a change; this store's own changes take
	// the high bits.
	return s.keysGen.Load()<<40 ^ fi.Size(), nil
}

// keysFile opens KeysChangedName (creating it) on first use and keeps it
// open: a stat through an open file costs a third of one by path.
func (s *Store) keysFile() (*os.File, error) {
	if f := s.keysWatch.Load(); f != nil {
		return f, nil
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	if f := s.keysWatch.Load(); f != nil {
		return f, nil
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	f, err := os.OpenFile(filepath.Join(s.dir, KeysChangedName), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	s.keysWatch.Store(f)
	return f, nil
}

// closeKeysFile closes the file keysFile opened, if it did.
func (s *Store) closeKeysFile() error {
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	if f := s.keysWatch.Swap(nil); f != nil {
		return f.Close()
	}
	return nil
}
