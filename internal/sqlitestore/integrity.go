package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrDamaged is what Open's error matches (errors.Is) when the database
// is damaged or lost writes. Damage is refused at open, with the repair,
// never served from: that would silently forget batches and replies.
var ErrDamaged = errors.New("the database is damaged")

// quickCheck runs PRAGMA quick_check (integrity_check without comparing
// index contents): about 1.7 s per GiB (BenchmarkQuickCheck50k), which a
// start can afford.
func quickCheck(ctx context.Context, db *sql.DB, path string) error {
	var problems []string
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(5)`)
	err = eachRow(rows, err, "quick_check", func(rows *sql.Rows) error {
		var p string
		if err := rows.Scan(&p); err != nil {
			return err
		}
		if p != "ok" {
			problems = append(problems, p)
		}
		return nil
	})
	if err != nil {
		return damaged(path, err.Error())
	}
	if len(problems) > 0 {
		return damaged(path, strings.Join(problems, "; "))
	}
	return nil
}

func damaged(path, what string) error {
	dir := filepath.Dir(path)
	return kindError{fmt.Sprintf("sqlitestore: %s is damaged (%s); refusing to start rather than serve from it: "+
		"stop every evs process on %s, then restore the data directory from a backup, or keep what is readable with "+
		"sqlite3 %s .recover | sqlite3 %s and move that file to %s (the damaged one aside)",
		path, oneLine(what), dir, path, path+".recovered", path), ErrDamaged}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// RunningName is the file in the data directory that says an evs serve
// has the database open (OpenServing makes it, Close removes it). Found
// with no server holding the serve lock, it means the last server stopped
// uncleanly, and evs.db-wal then holds its latest writes. Every process
// that removes it does so while the log is still there, so it is never
// left without the log unless the log really went missing.
const RunningName = "serve.running"

type opener int

const (
	openServer  opener = iota // OpenServing, holding the serve lock
	openCommand               // Open: may write, beside a server or not
	openBackup                // Backup: reads only
)

// checkWAL refuses a database whose write-ahead log is missing although
// the last server stopped without closing it. Others than the server look
// at the serve lock (a running server's marker is no sign of a crash); a
// command finding the marker stale and the log there removes it under the
// lock.
func checkWAL(dir string, by opener) error {
	marker := filepath.Join(dir, RunningName)
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if by != openServer {
		lock, err := lockDir(dir)
		if errors.Is(err, ErrInUse) {
			return nil // a server runs: its marker is live
		}
		if err != nil {
			return err
		}
		defer lock.Close()
	}
	wal := filepath.Join(dir, FileName+"-wal")
	if fi, err := os.Stat(wal); err == nil && fi.Size() > 0 {
		if by == openCommand {
			if err := removeSynced(marker); err != nil {
				return fmt.Errorf("sqlitestore: remove %s: %w", marker, err)
			}
		}
		return nil
	}
	refusing := map[opener]string{openServer: "start", openCommand: "open it", openBackup: "back it up"}[by]
	return kindError{fmt.Sprintf("sqlitestore: %s is missing, but the last evs serve on %s stopped without closing the database "+
		"(killed, crashed or powered off), and that file then held any writes it had not yet copied into %s; refusing to %s until you decide: "+
		"if the file was moved, put it back; if another program (sqlite3) opened %s since, it copied them in and nothing is lost; "+
		"otherwise those last writes are lost, but %s still holds everything before them (restoring a backup instead would also lose "+
		"everything written since the backup): to go on with %s as it is, delete %s",
		wal, dir, FileName, refusing, FileName, FileName, FileName, marker), ErrDamaged}
}

// markRunning creates the running marker of a serving store, synced with
// its directory entry, so a crash from here on leaves it behind.
func markRunning(dir string) error {
	path := filepath.Join(dir, RunningName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = cmp.Or(f.Sync(), f.Close())
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: create %s: %w", path, err)
	}
	return nil
}

func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
