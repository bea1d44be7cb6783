package dnscheck

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSystemServers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"two servers", write("a", "search corp.example\nnameserver 10.0.0.2\nnameserver ::1\noptions ndots:1\n"),
			[]string{"10.0.0.2:53", "[::1]:53"}},
		{"no nameserver", write("b", "search corp.example\n"), []string{"127.0.0.1:53"}},
		{"missing file", filepath.Join(dir, "none"), []string{"127.0.0.1:53"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := systemServers(tt.path); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
