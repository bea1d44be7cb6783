package replylog

import (
	"fmt"
	"os"
	"runtime"
)

// syncDir makes the entries of dir (a new segment's name) durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for syncing there
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("replylog: open directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("replylog: sync directory: %w", err)
	}
	return nil
}
