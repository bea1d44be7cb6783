package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/evs-dev/evs/internal/config"
)

var updateCLIDoc = flag.Bool("update-cli-doc", false, "rewrite docs/cli.md from the command tree")

// commandPaths lists every command of the tree as its arguments ("keys",
// "create"), the root as none, hidden commands left out.
func commandPaths(t *testing.T) ([][]string, map[string]*cobra.Command) {
	t.Helper()
	root := newRoot(&cli{ctx: context.Background(), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }})
	// The help and completion commands are added when the tree first runs.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var paths [][]string
	byPath := map[string]*cobra.Command{}
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		if cmd.Hidden {
			return
		}
		paths = append(paths, path)
		byPath[strings.Join(path, " ")] = cmd
		for _, sub := range cmd.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(root, nil)
	return paths, byPath
}

// TestHelpEveryCommand: --help, -h and `evs help` answer every command
// with exit 0 and, on stdout alone, a usage that names every flag the
// command takes and every environment variable it reads; every flag has a
// description.
func TestHelpEveryCommand(t *testing.T) {
	paths, byPath := commandPaths(t)
	if len(paths) < 15 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"evs"}, path...), " ")
		cmd := byPath[strings.Join(path, " ")]
		for _, args := range [][]string{append(path, "--help"), append(path, "-h"), append([]string{"help"}, path...)} {
			code, out, stderr := runEVS(context.Background(), nil, args...)
			if code != 0 || stderr != "" || !strings.Contains(out, "Usage:\n  "+name) {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want 0 and the usage of %s", args, code, stderr, out, name)
				continue
			}
			cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Hidden {
					return
				}
				if strings.TrimSpace(f.Usage) == "" {
					t.Errorf("%s --%s has no description", name, f.Name)
				}
				if !strings.Contains(out, "--"+f.Name+" ") {
					t.Errorf("%v: the help does not list --%s:\n%s", args, f.Name, out)
				}
			})
			env := envNames(cmd)
			if len(env) > 0 && !strings.Contains(out, "\nEnvironment:\n") {
				t.Errorf("%v: no Environment section:\n%s", args, out)
			}
			for _, v := range env {
				if !strings.Contains(out, "\n  "+v+" ") {
					t.Errorf("%v: the help does not list %s", args, v)
				}
			}
		}
	}
}

// TestCommandsReadTheirEnvironment: the commands that take configuration
// say so in their help; those that read none list nothing.
func TestCommandsReadTheirEnvironment(t *testing.T) {
	_, byPath := commandPaths(t)
	want := map[string][]string{
		"serve":           {"EVS_ADDR", "EVS_DATA_DIR", "EVS_SMTP", "EVS_AUTH_TTL", "EVS_METRICS_ADDR"},
		"keys create":     {"EVS_DATA_DIR", "AWS_REGION", "EVS_USAGE_PLAN_ID"},
		"keys revoke":     {"EVS_DATA_DIR", "AWS_REGION"},
		"keys list":       {"EVS_DATA_DIR", "AWS_REGION"},
		"webhooks secret": {"EVS_DATA_DIR", "AWS_REGION"},
		"verify":          {"EVS_DNS_SERVERS", "EVS_SMTP", "EVS_SMTP_HELO", "EVS_EGRESS_ALLOW"},
		"batch":           {"EVS_API_KEY", "EVS_URL"},
	}
	for path, vars := range want {
		got := strings.Join(envNames(byPath[path]), " ")
		for _, v := range vars {
			if !strings.Contains(" "+got+" ", " "+v+" ") {
				t.Errorf("evs %s: the help's environment (%s) lacks %s", path, got, v)
			}
		}
	}
}

// TestUnknownFlagRefused: an unknown flag, on any command, is exit 2 with
// the mistake and the command's usage line on stderr, and nothing done.
func TestUnknownFlagRefused(t *testing.T) {
	paths, _ := commandPaths(t)
	dir := t.TempDir()
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": "127.0.0.1:0"}
	for _, path := range paths {
		args := append(append([]string{}, path...), "--no-such-flag")
		code, out, stderr := runEVS(context.Background(), env, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || out != "" || len(lines) != 3 || lines[0] != "evs: unknown flag: --no-such-flag" || !strings.HasPrefix(lines[1], "usage: evs") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, the mistake and a usage line", args, code, out, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused command touched the data directory: %v", entries)
	}
}

// TestFlagsAnywhere: flags may come before or after the arguments, in
// either spelling (--mode quick, --mode=quick); "--" ends the flags.
func TestFlagsAnywhere(t *testing.T) {
	env := map[string]string{"EVS_DNS_SERVERS": "127.0.0.1:9", "EVS_SMTP": "off"}
	for _, args := range [][]string{
		{"verify", "bad@@x.example", "--mode", "quick"},
		{"verify", "--mode", "quick", "bad@@x.example"},
		{"verify", "bad@@x.example", "--mode=quick"},
	} {
		code, out, stderr := runEVS(context.Background(), env, args...)
		var v struct {
			Decision struct{ Mode, Reason string } `json:"decision"`
		}
		if code != 0 || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &v) != nil || v.Decision.Mode != "quick" || v.Decision.Reason != "invalid_syntax" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one quick decision", args, code, out, stderr)
		}
	}
	// After "--", a word that looks like a flag is an address.
	code, out, _ := runEVS(context.Background(), env, "verify", "--mode", "quick", "--", "--mode")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"invalid_syntax"`) {
		t.Errorf("verify -- --mode: exit %d, %q", code, out)
	}

	dir := t.TempDir()
	kenv := map[string]string{"EVS_DATA_DIR": dir}
	if code, out, stderr := runEVS(context.Background(), kenv, "keys", "create", "--test", "--account=late"); code != 0 || !keyRE.MatchString(strings.TrimSpace(out)) {
		t.Fatalf("keys create --test --account=late: %d %q %q", code, out, stderr)
	}
	_, list, _ := runEVS(context.Background(), kenv, "keys", "list")
	fields := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[1])
	if fields[1] != "late" || fields[2] != "test" {
		t.Fatalf("list: %q", list)
	}
	if code, out, stderr := runEVS(context.Background(), kenv, "keys", "revoke", fields[0], "--dynamodb-table="); code != 0 || !strings.Contains(out, fields[0]) {
		t.Fatalf("keys revoke ID --flag: %d %q %q", code, out, stderr)
	}
}

// TestCompletion: the completion scripts come from the command tree, and
// the tree completes commands and flag values.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := runEVS(context.Background(), nil, "completion", shell)
		if code != 0 || stderr != "" || !strings.Contains(out, "__complete") || !strings.Contains(out, "evs") {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, stderr, len(out))
		}
	}
	complete := func(args ...string) []string {
		t.Helper()
		code, out, stderr := runEVS(context.Background(), nil, append([]string{"__complete"}, args...)...)
		if code != 0 {
			t.Fatalf("__complete %v: exit %d %q", args, code, stderr)
		}
		var words []string
		for _, line := range strings.Split(out, "\n") {
			if line != "" && !strings.HasPrefix(line, ":") {
				words = append(words, strings.SplitN(line, "\t", 2)[0])
			}
		}
		return words
	}
	if got := strings.Join(complete("keys", ""), " "); got != "create list revoke" {
		t.Errorf("evs keys <TAB>: %q", got)
	}
	if got := strings.Join(complete("verify", "a@x.example", "--mode", ""), " "); got != "quick full" {
		t.Errorf("evs verify --mode <TAB>: %q", got)
	}
	if got := complete("keys", "create", "--"); !strings.Contains(strings.Join(got, " "), "--account") {
		t.Errorf("evs keys create --<TAB>: %q", got)
	}
}

// cliReference renders the help of every command, as docs/cli.md holds it.
func cliReference(t *testing.T) string {
	paths, _ := commandPaths(t)
	var b strings.Builder
	b.WriteString("# The `evs` command line\n\n" +
		"Every command's `--help`, as `evs` prints it (this page is written by\n" +
		"`go test ./infra/evs -run TestCLIReference -update-cli-doc`, and the test\n" +
		"fails when it and the commands differ). Shell completion:\n" +
		"`source <(evs completion bash)`; also `zsh` and `fish`.\n")
	for _, path := range paths {
		if len(path) > 0 && (path[0] == "completion" || path[0] == "help") {
			continue // cobra's own, the same in every program
		}
		name := strings.Join(append([]string{"evs"}, path...), " ")
		_, out, _ := runEVS(context.Background(), nil, append(path, "--help")...)
		b.WriteString("\n## " + name + "\n\n```\n" + out + "```\n")
	}
	return b.String()
}

// TestCLIReference: docs/cli.md is the help of every command as it is.
func TestCLIReference(t *testing.T) {
	file := filepath.Join("..", "..", "docs", "cli.md")
	want := cliReference(t)
	if *updateCLIDoc {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("docs/cli.md differs from the commands' help; rewrite it with: go test ./infra/evs -run TestCLIReference -update-cli-doc")
	}
}

// TestServeHelpListsEveryVariable: evs serve --help lists every EVS_*
// variable evs knows, except those only the AWS stack or the API's
// clients read, and the test harness's.
func TestServeHelpListsEveryVariable(t *testing.T) {
	notServe := map[string]bool{
		"EVS_API_KEY": true, "EVS_URL": true, "EVS_USAGE_PLAN_ID": true, // clients and evs keys on AWS
		"EVS_BATCHES_TABLE": true, "EVS_IDEMPOTENCY_TABLE": true, "EVS_INPUT_BUCKET": true, "EVS_KEYS_TABLE": true,
		"EVS_RESULTS_TABLE": true, "EVS_QUEUE_URL": true, "EVS_SMTP_PROXY_SECRET": true,
		"EVS_SES_ACCOUNT": true, "EVS_SES_QUEUE_ARN": true, // the AWS worker's SES notification queue
		"EVS_MOTO_ENDPOINT": true, "EVS_TEST_SOCKS5": true, "EVS_TEST_SOCKS5_EXTERNAL": true, "EVS_SCREENSHOTS": true,
	}
	var want []string
	for _, k := range config.Known {
		if !notServe[k] {
			want = append(want, k)
		}
	}
	sort.Strings(want)
	_, cmds := commandPaths(t)
	if got := envNames(cmds["serve"]); !reflect.DeepEqual(got, want) {
		t.Fatalf("evs serve --help lists %v,\nwant %v", got, want)
	}
}

// envNames lists the variables a command's help names.
func envNames(cmd *cobra.Command) []string {
	var names []string
	for _, line := range strings.Split(cmd.Annotations[envAnnotation], "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	sort.Strings(names)
	return names
}
