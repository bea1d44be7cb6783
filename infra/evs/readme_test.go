package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeQuickStart runs the README's quick start as a reader pastes
// it, with curl and jq, against `evs serve --test-account` as `make run`
// starts it (on a free port instead of 8080, and with the key it printed):
// every line works, the batch id comes from request.id, and the batch
// holding greylisted@… is completed by the time the results are read.
func TestReadmeQuickStart(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start needs %s", tool)
		}
	}
	block := readmeBlock(t, "sh", "export EVS_API_KEY=evs.… ")
	if !strings.Contains(block, "ID=$(curl") || !strings.Contains(block, "jq -r .request.id") {
		t.Fatalf("the quick start does not take the batch id from request.id:\n%s", block)
	}
	env := map[string]string{"EVS_DATA_DIR": t.TempDir(), "EVS_ADDR": "127.0.0.1:0", "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}
	srv := serveInProcess(t, env, "--test-account")
	host := regexp.MustCompile(`listening on http://([0-9.:]+)`).FindStringSubmatch(srv.out.String())[1]
	key := printedKey.FindStringSubmatch(srv.out.String())[1]
	checkConsoleLines(t, srv, host)

	lines := strings.SplitN(block, "\n", 2)
	script := "export EVS_API_KEY=" + key + "\n" + strings.ReplaceAll(lines[1], "localhost:8080", host)
	// Between creating the batch and reading its results a reader takes a
	// few seconds; the test-mode back-off of greylisted@… is 1 s, twice.
	script = strings.Replace(script, "\ncurl -s "+host+"/v1/requests/$ID/results", "\nsleep 3\ncurl -s "+host+"/v1/requests/$ID/results", 1)
	script += "echo \"ID=$ID\"\n"
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	got := string(out)
	id := regexp.MustCompile(`(?m)^ID=([0-9a-f-]{36})$`).FindStringSubmatch(got)
	for _, want := range []string{`"status":"undeliverable"`, `"reason":"rejected_email"`, "email,status,reason", "greylisted@example.com,unknown,greylisted"} {
		if !strings.Contains(got, want) {
			t.Errorf("the quick start's output lacks %s:\n%s", want, got)
		}
	}
	if id == nil || !strings.Contains(got, `"request":{"id":"`+id[1]+`"`) {
		t.Errorf("the batch id is not request.id:\n%s", got)
	}
}

// readmeBlock is the first code block of README.md fenced as lang whose
// text starts with start: the examples a reader pastes are the tests'.
func readmeBlock(t *testing.T, lang, start string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + regexp.QuoteMeta(lang) + "\n(" + regexp.QuoteMeta(start) + ".*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("no ```%s block starting with %q in README.md", lang, start)
	}
	return string(m[1])
}

// checkConsoleLines: the start `make run` makes prints the console's
// address twice, beside the key (for the reader who has no terminal
// skills) and on the line every start prints, and it serves the page.
func checkConsoleLines(t *testing.T, srv servingEVS, host string) {
	t.Helper()
	want := "http://" + host + "/console/"
	// The widget's line comes last.
	out := srv.out.Await(t, 10*time.Second, `the "sign-up widget:" line`, func(s string) bool { return strings.Contains(s, "sign-up widget: ") })
	if !strings.Contains(out, "\n  "+want+"\n") || !strings.Contains(out, "\nweb console: "+want+"\n") {
		t.Errorf("the console's address %s is not printed beside the key and on its own line:\n%s", want, out)
	}
	widget := "http://" + host + "/widget.js"
	if !strings.Contains(out, "\nsign-up widget: "+widget+" ") {
		t.Errorf("the widget's address %s is not printed:\n%s", widget, out)
	}
	for url, ctype := range map[string]string{want: "text/html", widget: "text/javascript"} {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s, want %s", url, res.StatusCode, res.Header.Get("Content-Type"), ctype)
		}
	}
}

// TestReadmeGoClient builds the README's Go example as a reader's own
// module would (requiring github.com/evs-dev/evs, here replaced by this
// tree) and runs it against `evs serve --test-account` as `make run`
// starts it: the verdict, then the CSV batch's rows with theirs.
func TestReadmeGoClient(t *testing.T) {
	src := readmeBlock(t, "go", "package main\n")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EVS_DATA_DIR": t.TempDir(), "EVS_ADDR": "127.0.0.1:0", "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}
	srv := serveInProcess(t, env, "--test-account")
	host := regexp.MustCompile(`listening on http://([0-9.:]+)`).FindStringSubmatch(srv.out.String())[1]
	key := printedKey.FindStringSubmatch(srv.out.String())[1]

	dir := t.TempDir()
	mod := "module readme.example\n\ngo 1.26\n\nrequire github.com/evs-dev/evs v0.0.0\n\nreplace github.com/evs-dev/evs => " + root + "\n"
	src = strings.ReplaceAll(src, "http://localhost:8080", "http://"+host)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	// Offline, as CI is: the client needs nothing but the standard library.
	cmd.Env = append(os.Environ(), "EVS_API_KEY="+key, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Go example failed: %v\n%s", err, out)
	}
	for _, want := range []string{"undeliverable rejected_email\n", "ann@example.com deliverable accepted_email\n", "bob+mailbox_full@example.com risky mailbox_full\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the Go example's output lacks %q:\n%s", want, out)
		}
	}
}
