package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Widget returns the sign-up widget's source as internal/api embeds it, and
// its version: 16 hex digits of its SHA-256, the ETag and the ?v= that pins
// it.
func Widget(t testing.TB) (script []byte, version string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "api", "widget", "widget.js"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(script)
	return script, hex.EncodeToString(sum[:8])
}
