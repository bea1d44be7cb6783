package replylog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSyncKinds: each way of syncing is offered by this kernel (or the test
// says why not) and syncs a written file without falling back.
func TestSyncKinds(t *testing.T) {
	for _, kind := range []string{syncURing, syncAIO, syncFdatasync} {
		t.Run(kind, func(t *testing.T) {
			forceSync = kind
			defer func() { forceSync = "" }()
			s := newSyncer()
			defer s.close()
			if got := s.name(); got != kind {
				// Only a kernel or sandbox that refuses the kind may
				// make it fall back.
				var err error
				switch kind {
				case syncURing:
					_, err = newURing()
				case syncAIO:
					_, err = newAIO()
				}
				if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
					t.Skipf("this kernel refuses %s (%v): the log falls back to %s", kind, err, got)
				}
				t.Fatalf("syncer is %s, want %s (setup: %v)", got, kind, err)
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "seg"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for i := range 3 {
				if _, err := f.WriteAt([]byte("record"), int64(i*6)); err != nil {
					t.Fatal(err)
				}
				if err := s.datasync(f); err != nil {
					t.Fatalf("sync %d: %v", i, err)
				}
			}
			if got := s.name(); got != kind {
				t.Fatalf("fell back to %s after syncing", got)
			}
			// A closed file is an error to report, not a reason to fall
			// back.
			f.Close()
			if err := s.datasync(f); err == nil {
				t.Fatal("sync of a closed file: no error")
			}
		})
	}
}

// The structs shared with the kernel have the kernel's sizes.
func TestABISizes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		got, want uintptr
	}{
		{"struct iocb", unsafe.Sizeof(iocb{}), 64},
		{"struct io_event", unsafe.Sizeof(ioEvent{}), 32},
		{"struct io_uring_params", unsafe.Sizeof(uringParams{}), 120},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %d bytes, want %d", tt.name, tt.got, tt.want)
		}
	}
}
