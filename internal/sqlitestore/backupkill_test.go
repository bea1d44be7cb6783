//go:build unix

package sqlitestore

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Environment variables that make a re-executed test binary the child
// processes of TestBackupKilled: a server (killed to leave a crashed data
// directory) or a backup (killed mid-way).
const (
	serveChildEnv  = "EVS_SQLITESTORE_SERVE_CHILD"  // the data directory
	backupChildEnv = "EVS_SQLITESTORE_BACKUP_CHILD" // the data directory, then the destination, as a path list
)

// TestServeChild is not a test of its own: it is the server that
// crashedDir kills after one acknowledged write, and that
// TestServerKilledWhileClosing kills as it closes the store (once a line
// arrives on its standard input).
func TestServeChild(t *testing.T) {
	dir := os.Getenv(serveChildEnv)
	if dir == "" {
		t.Skip("the server process of crashedDir; runs only when re-executed by it")
	}
	ctx := context.Background()
	s, err := OpenServing(ctx, dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, evs.Account{ID: "a", Name: "owner", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err == nil {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("closed")
	}
	awaitKill(t)
}

// TestBackupChild is not a test of its own: it is the `evs backup` that
// TestBackupKilled kills.
func TestBackupChild(t *testing.T) {
	v := os.Getenv(backupChildEnv)
	if v == "" {
		t.Skip("the backup process of TestBackupKilled; runs only when re-executed by it")
	}
	p := filepath.SplitList(v)
	fmt.Println("started")
	if err := Backup(context.Background(), p[0], p[1]); err != nil {
		t.Fatal(err)
	}
}

// fillerMiB is the size of the data that makes a backup take long enough
// to be killed while it copies.
const fillerMiB = 96

// crashedDir makes a data directory as a server leaves it when it is
// killed with SIGKILL: evs.db large (fillerMiB), serve.running behind, and
// the account "a", acknowledged, in evs.db-wal alone. The filler is zeros:
// SQLite copies its pages as any others, and making as much randomness in
// SQLite (compiled from C, under the race detector) took two minutes.
func crashedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE backup_test_filler (b BLOB)`,
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < %d) INSERT INTO backup_test_filler SELECT zeroblob(65536) FROM n`, fillerMiB*16),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cmd, sc := startHelper(t, "TestServeChild", serveChildEnv, dir)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the server child did not start: %q", sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wal, err := os.Stat(filepath.Join(dir, FileName+"-wal"))
	if _, merr := os.Stat(filepath.Join(dir, RunningName)); err != nil || wal.Size() == 0 || merr != nil {
		t.Fatalf("the killed server left no log (%v) or no marker (%v): this test tests nothing", err, merr)
	}
	return dir
}

// copyDir copies the files of a data directory that a crash leaves to a
// new directory (not the shared-memory index, which SQLite rebuilds).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range []string{FileName, FileName + "-wal", RunningName} {
		in, err := os.Open(filepath.Join(src, n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(dst, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// killPoint says when the backup is killed: it is given the data directory
// and the destination, and polled until it is true or the backup ended.
type killPoint func(dir, dest string) bool

var killPoints = map[string]killPoint{
	// Before the backup has done anything much.
	"at once": func(string, string) bool { return true },
	// While SQLite writes the copy.
	"copying": func(_, dest string) bool {
		m, _ := filepath.Glob(filepath.Join(dest, FileName+".partial-*"))
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
				return true
			}
		}
		return false
	},
	// The instant the data directory's log is gone, if the backup ever
	// removes it: copied into evs.db as the backup closes the database.
	"log gone": func(dir, _ string) bool {
		_, err := os.Stat(filepath.Join(dir, FileName+"-wal"))
		return errors.Is(err, os.ErrNotExist)
	},
}

// killBackup runs Backup(dir, dest) in a child process and kills it with
// SIGKILL at the kill point; it tells whether the kill landed before the
// backup ended.
func killBackup(t *testing.T, dir, dest string, at killPoint) bool {
	t.Helper()
	cmd, sc := startHelper(t, "TestBackupChild", backupChildEnv, dir+string(filepath.ListSeparator)+dest)
	if !sc.Scan() || sc.Text() != "started" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the backup child did not start: %q", sc.Text())
	}
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	// The kill point is looked at every millisecond: often enough to land
	// in a copy of fillerMiB, without taking a CPU from the backup.
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !at(dir, dest) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the backup failed: %v", err)
			}
			return false
		case <-deadline.C:
			cmd.Process.Kill()
			<-done
			t.Fatal("the backup neither reached the kill point nor ended in 60 s")
		case <-tick.C:
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// fileSums are the SHA-256 sums of the database, its log and the running
// marker (empty) in dir; a file that is missing has none, nor an empty log
// (which a reader may create, and which holds nothing).
func fileSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, n := range []string{FileName, FileName + "-wal", RunningName} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if errors.Is(err, os.ErrNotExist) || err == nil && len(b) == 0 && n != RunningName {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sums[n] = fmt.Sprintf("%x", sha256.Sum256(b))[:12]
	}
	return sums
}

// checkMarkerTrue fails unless the data directory's running marker, when
// there is one and no server holds the directory, has the log it guards.
func checkMarkerTrue(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, RunningName)); err != nil {
		return
	}
	if lock, err := lockDir(dir); err != nil {
		return // a server runs: its marker is live
	} else {
		lock.Close()
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName+"-wal")); err != nil || fi.Size() == 0 {
		t.Errorf("%s is left behind but the log is gone (%v): the next start would say writes are lost when none are", RunningName, err)
	}
}

// TestBackupKilled kills `evs backup` (a child process) with SIGKILL at
// several points, on a data directory a server left crashed, one a server
// is serving, and one stopped cleanly. Whatever the point, the next start
// serves every acknowledged write and claims no loss; and a log that is
// really lost after a crash is still refused, the killed backup
// notwithstanding.
func TestBackupKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("copies a large database several times")
	}
	ctx := context.Background()
	crashed := crashedDir(t)
	stopped := copyDir(t, crashed)
	s, err := OpenServing(ctx, stopped, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	type source struct {
		from  string
		serve bool // a server holds the directory while the backup runs
	}
	sources := map[string]source{"crashed": {from: crashed}, "serving": {from: crashed, serve: true}, "stopped": {from: stopped}}
	for _, srcName := range []string{"crashed", "serving", "stopped"} {
		for _, kpName := range []string{"at once", "copying", "log gone"} {
			for _, loseWAL := range []bool{false, true} {
				src := sources[srcName]
				if loseWAL && srcName != "crashed" {
					continue // only after a crash are writes in the log alone
				}
				name := srcName + "/" + kpName
				if loseWAL {
					name += "/log then lost"
				}
				t.Run(name, func(t *testing.T) {
					dir := copyDir(t, src.from)
					var server *Store
					if src.serve {
						if server, err = OpenServing(ctx, dir, func() time.Time { return t0 }); err != nil {
							t.Fatal(err)
						}
						defer server.Close()
					}
					before := fileSums(t, dir)
					dest := filepath.Join(t.TempDir(), "copy")
					killed := killBackup(t, dir, dest, killPoints[kpName])
					if after := fileSums(t, dir); server == nil && !maps.Equal(after, before) {
						t.Errorf("the backup changed the data directory: %v, was %v", after, before)
					}
					t.Logf("killed mid-way: %v", killed)
					if kpName == "copying" && !killed {
						t.Fatalf("the backup of %d MiB ended before it was killed while copying: this case tests nothing", fillerMiB)
					}
					if server != nil {
						if _, err := server.Account(ctx, "a"); err != nil {
							t.Fatalf("the server, after the backup was killed: %v", err)
						}
						if err := server.Close(); err != nil {
							t.Fatal(err)
						}
					}
					checkMarkerTrue(t, dir)
					if loseWAL {
						if err := os.Remove(filepath.Join(dir, FileName+"-wal")); err != nil && !errors.Is(err, os.ErrNotExist) {
							t.Fatal(err)
						}
						st, err := OpenServing(ctx, dir, func() time.Time { return t0 })
						if err == nil {
							st.Close()
							t.Fatal("a start served a database whose log was lost after a crash")
						}
						if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "is missing") {
							t.Fatalf("the start on a lost log: %v", err)
						}
						return
					}
					st, err := OpenServing(ctx, dir, func() time.Time { return t0 })
					if err != nil {
						t.Fatalf("the next start: %v", err)
					}
					defer st.Close()
					if _, err := st.Account(ctx, "a"); err != nil {
						t.Fatalf("the acknowledged write, after the killed backup: %v", err)
					}
				})
			}
		}
	}
}

// TestServerKilledWhileClosing kills a server (a child process) with
// SIGKILL while it closes its store, at the instants its marker, then its
// log, are gone: the next start serves its acknowledged write and claims no
// loss.
func TestServerKilledWhileClosing(t *testing.T) {
	for _, at := range []string{RunningName, FileName + "-wal"} {
		t.Run(at+" gone", func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), serveChildEnv+"="+dir)
			cmd.Stderr = os.Stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			if !sc.Scan() || sc.Text() != "ready" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the server child did not start: %q", sc.Text())
			}
			path := filepath.Join(dir, at)
			if _, err := os.Stat(path); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the running server has no %s: %v", at, err)
			}
			fmt.Fprintln(in, "close")
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("%s still there 30 s after the server was told to close", at)
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			checkMarkerTrue(t, dir)
			st, err := OpenServing(context.Background(), dir, func() time.Time { return t0 })
			if err != nil {
				t.Fatalf("the next start: %v", err)
			}
			defer st.Close()
			if _, err := st.Account(context.Background(), "a"); err != nil {
				t.Fatalf("the acknowledged write: %v", err)
			}
		})
	}
}
