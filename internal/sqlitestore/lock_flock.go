//go:build unix && !aix

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the exclusive serve lock of dir without waiting. The lock
// is a flock on the open file, so the kernel drops it when the file is
// closed or the process dies, kill -9 included: no stale lock is left to
// clean up. It is advisory: only OpenServing asks for it.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open the serve lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, kindError{fmt.Sprintf("data directory %s is in use by another evs serve", dir), ErrInUse}
		}
		return nil, fmt.Errorf("sqlitestore: lock %s: %w", path, err)
	}
	return f, nil
}
