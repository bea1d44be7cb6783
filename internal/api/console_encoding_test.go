package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleWindows1252InBrowser picks, in the console, a small CSV as
// Excel on Windows saves it ("CSV": Windows-1252, CRLF): the page says it
// read the file as Windows-1252, and the user's names come back in the
// results as they were typed, not as U+FFFD. A UTF-16 file is refused in
// the API's words, and nothing is sent.
func TestConsoleWindows1252InBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := openPage(t, s)
	p.useKey(s.key)
	dir := t.TempDir()
	cp1252 := filepath.Join(dir, "kunden.csv")
	// "Jürgen Müller", "Zoë", "Ångström" in Windows-1252 bytes.
	if err := os.WriteFile(cp1252, []byte("email;name\r\nann@example.com;J\xfcrgen M\xfcller\r\nzoe+mailbox_full@example.com;Zo\xeb \xc5ngstr\xf6m\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.step("pick a Windows-1252 list", chromedp.SetUploadFiles(chromedp.ID("list-file"), []string{cp1252}),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=quick]`)), chromedp.Click(chromedp.ID("list-go")))
	p.finished("the Windows-1252 list")
	if note := p.text("list-note"); !strings.Contains(note, "kunden.csv") || !strings.Contains(note, "Windows-1252") {
		t.Errorf("the note on the file: %q; want it to name the file and Windows-1252", note)
	}
	csv := string(s.get(t, "/v1/requests/"+p.text("batch-id")+"/results", "text/csv"))
	for _, want := range []string{"Jürgen Müller", "Zoë Ångström"} {
		if !strings.Contains(csv, want) {
			t.Errorf("the results lack %q:\n%s", want, csv)
		}
	}
	if strings.ContainsRune(csv, '\uFFFD') {
		t.Errorf("the results hold U+FFFD:\n%s", csv)
	}

	utf16 := filepath.Join(dir, "unicode.csv")
	if err := os.WriteFile(utf16, []byte("\xff\xfee\x00m\x00a\x00i\x00l\x00\r\x00\n\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := len(p.log.sent(0))
	p.step("pick a UTF-16 list", chromedp.SetUploadFiles(chromedp.ID("list-file"), []string{utf16}), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if msg := p.text("error"); !strings.Contains(msg, "UTF-16") || !strings.Contains(msg, "CSV UTF-8") {
		t.Errorf("a UTF-16 file: %q; want the API's words (UTF-16, save as CSV UTF-8)", msg)
	}
	for _, r := range p.log.sent(mark) {
		if strings.HasPrefix(r, "POST ") {
			t.Errorf("a UTF-16 file was sent: %s", r)
		}
	}
	if eval[bool](p, `!document.getElementById("list-note").hidden`) {
		t.Errorf("the Windows-1252 note stays up for the next file")
	}
	p.done()
}
