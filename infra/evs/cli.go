package main

// The command line is built on github.com/spf13/cobra: GNU-style flags,
// --help on every command, and shell completion generated from the same
// command tree, so it never drifts from the flags.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/config"
)

// errUsage marks a command-line mistake: the error, the command's usage line
// and where to find more go to stderr, and the exit code is 2.
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// cli is what every command runs with: the streams and the environment
// (config.OSEnv, or a test's map).
type cli struct {
	ctx            context.Context
	stdout, stderr io.Writer
	getenv         func(string) string
	// environ lists the whole environment, for naming the EVS_* variables
	// evs does not read; nil where getenv is a test's map.
	environ func() []string
}

// unknownEnv is a warning for each EVS_* variable in the environment that
// evs does not read.
func (c *cli) unknownEnv() []string {
	if c.environ == nil {
		return nil
	}
	return config.Unknown(c.environ())
}

// Command groups of the top-level help.
const (
	groupMain = "main"
	groupDev  = "dev"
)

func newRoot(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "evs",
		Short: "the operator tool of the email verification service",
		Long: `evs is the operator tool of the email verification service: the whole API on
one machine (serve), API keys and webhook secrets (keys, webhooks), the
verification engine alone (verify) and a CSV client of the API (batch).

Configuration comes from the environment (EVS_*), the same variables the
Lambda functions read; each command's --help lists the ones it reads.`,
		Version: config.ReadBuildInfo(version).Version,
		// A bare `evs` is a mistake (exit 2), not a request for help.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("a command is needed")
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				return usageErrorf("unknown command %q; did you mean %s?", args[0], strings.Join(s, " or "))
			}
			return usageErrorf("unknown command %q", args[0])
		},
		SilenceErrors:              true,
		SuggestionsMinimumDistance: 2,
		SilenceUsage:               true,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetContext(c.ctx)
	root.SetVersionTemplate("evs {{.Version}}\n")
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddGroup(&cobra.Group{ID: groupMain, Title: "Commands:"}, &cobra.Group{ID: groupDev, Title: "Development (make sam-local):"})
	for _, cmd := range []*cobra.Command{newServeCmd(c), newBackupCmd(c), newKeysCmd(c), newVerifyCmd(c), newBatchCmd(c), newWebhooksCmd(c), newOutcomesCmd(c), newVersionCmd(c)} {
		cmd.GroupID = groupMain
		root.AddCommand(cmd)
	}
	dev := newSamLocalInitCmd(c)
	dev.GroupID = groupDev
	root.AddCommand(dev)
	root.SetHelpCommandGroupID(groupMain)
	root.SetCompletionCommandGroupID(groupMain)
	// cobra's completion command prints its help and succeeds when no
	// shell is named; a script that pipes it would source nothing.
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "completion" {
			group(cmd)
		}
	}
	return root
}

// execute runs root on args and turns the outcome into an exit code: 0,
// 1 for a failure, 2 for a command-line mistake.
func execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	// Errors from outside a command's own run are all command-line
	// mistakes, whatever their type.
	ran := false
	var mark func(*cobra.Command)
	mark = func(cmd *cobra.Command) {
		if run := cmd.RunE; run != nil {
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				ran = true
				return run(cmd, args)
			}
		}
		for _, sub := range cmd.Commands() {
			mark(sub)
		}
	}
	mark(root)
	cmd, err := root.ExecuteC()
	switch {
	case err == nil:
		return 0
	case !ran || errors.Is(err, errUsage):
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		use := cmd.UseLine()
		if cmd.HasAvailableSubCommands() {
			use = cmd.CommandPath() + " [command]"
		}
		fmt.Fprintf(stderr, "evs: %s\nusage: %s\nRun '%s --help' for every flag and the environment it reads.\n", msg, use, cmd.CommandPath())
		return 2
	default:
		fmt.Fprintf(stderr, "evs: %s\n", userWords(err))
		return 1
	}
}

// userWords is err's text without the package names and error codes the
// service's errors carry for its logs ("sqlitestore: ", "invalid_request: ").
func userWords(err error) string {
	return packageTagRe.ReplaceAllString(err.Error(), "$1")
}

var packageTagRe = regexp.MustCompile(`(^|: )(?:sqlitestore|dynamostore|store|smtpprobe|dnscheck|verify|config|authorizer|batch|webhook|idempotency|server|api|politeness|sqsqueue|awsinit|cache|gateway|app|lambda|` +
	// The error codes the API's envelope carries (evs.Error): the
	// message after one is already in the user's words.
	`invalid_request|not_found|invalid_state|unavailable|internal_error|forbidden|unauthorized|rate_limited): `)

// noArgs and argsFrom check the positional arguments, as usage errors
// that name what was expected.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// argsFrom takes from least to most arguments (most < 0: no bound).
func argsFrom(least, most int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < least || most >= 0 && len(args) > most {
			return usageErrorf("%s needs %s", cmd.CommandPath(), what)
		}
		return nil
	}
}

// group makes a command that only holds subcommands: run alone, or with a
// name it does not have, it is a usage error naming the ones it has.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		if len(args) > 0 {
			return usageErrorf("unknown %s command %q (%s)", cmd.Name(), args[0], strings.Join(names, ", "))
		}
		return usageErrorf("%s needs a command: %s", cmd.Name(), strings.Join(names, ", "))
	}
	return cmd
}

// envAnnotation is the annotation that lists the variables a command reads.
const envAnnotation = "env"

// withEnv records the environment variables cmd reads, for its help.
func withEnv(cmd *cobra.Command, names ...string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	width := len(slices.MaxFunc(names, func(a, b string) int { return cmp.Compare(len(a), len(b)) }))
	var b strings.Builder
	for _, n := range names {
		doc, ok := envDocs[n]
		if !ok {
			panic("evs: no description of " + n) // caught by every test that builds the tree
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, doc)
	}
	cmd.Annotations[envAnnotation] = strings.TrimRight(b.String(), "\n")
	return cmd
}

// envDocs describes each variable in a command's help; the README's
// configuration table is the longer form.
var envDocs = map[string]string{
	"EVS_ADDR":                      "listen address (default 127.0.0.1:8080)",
	"EVS_DATA_DIR":                  "embedded store directory (default ./.data)",
	"EVS_DNS_SERVERS":               "comma-separated host:port resolvers (default: the system's)",
	"EVS_SMTP":                      "direct, proxy or off (default direct)",
	"EVS_SMTP_PROXY":                "SOCKS5 exits for SMTP probes: socks5://[user:pass@]host:port[#egress-ip], comma-separated for several (each with its own politeness budget)",
	"EVS_SMTP_PORT":                 "port dialled on MX hosts (default 25)",
	"EVS_SMTP_HELO":                 "EHLO name (default: the host name, with a warning)",
	"EVS_SMTP_FROM":                 "MAIL FROM address (default verify@<helo>)",
	"EVS_EGRESS_ALLOW":              "CIDRs probes and webhooks may reach although not public",
	"EVS_SMTP_EXIT_TIMEOUT":         "longest a SOCKS exit may take to answer its handshake, up to the CONNECT, and a health probe (default 5s)",
	"EVS_SMTP_EXIT_CANARY":          "IP:port a SOCKS exit's health probe CONNECTs to (default: the exit's own loopback, any reply passing)",
	"EVS_SMTP_EGRESS_IP":            "public address probes leave from (direct, or one SOCKS exit; several: #egress-ip each): checked hourly against EVS_BLOCKLISTS and the HELO name",
	"EVS_BLOCKLISTS":                "DNS blocklist zones the self-check asks, or none (default zen.spamhaus.org,bl.spamcop.net,b.barracudacentral.org)",
	"EVS_SELFCHECK_EVERY":           "how often the egress self-check runs after the one at start (default 1h, at least 1s)",
	"EVS_RATE_LIMIT":                "per-account requests per second, or off (default 50)",
	"EVS_AUTH_TTL":                  "longest an authorizer answer is cached (default 300s; 0 off)",
	"EVS_RETENTION_DAYS":            "days batches and results are kept (default 30)",
	"EVS_LOG_LEVEL":                 "debug, info, warn or error (default info)",
	"EVS_MAX_ACTIVE_BATCHES":        "batches queued or running per account (default 10)",
	"EVS_BATCH_DEADLINE":            "a batch's time limit from its start (default 24h)",
	"EVS_CACHE_TTL":                 "how long a live verdict is reused for the same account and address (default 24h; 0 = off)",
	"EVS_OUTCOME_TTL":               "how long a reported outcome (POST /v1/outcomes) is kept: days like 365d or a duration (default 365d)",
	"EVS_OUTCOME_SHARE_DOMAINS":     "on scores accept-all domains by every account's outcomes, as per-domain counts (default off: each account's own)",
	"EVS_SNS_TOPICS":                "comma-separated SNS TopicArns whose SES notifications POST /v1/outcomes/sns takes (default: any that verifies)",
	"EVS_QUOTA_ADDRESSES":           "addresses per account and period; 0 = no quota (default 0)",
	"EVS_QUOTA_PERIOD":              "the quota's period: day or month (default month)",
	"EVS_MAX_STORED_BYTES":          "bytes kept per account (lists, results, exports, outcomes, uploads); 0 or off = none (default 4 GiB)",
	"EVS_MAX_OUTCOMES":              "outcomes kept per account; 0 or off = none (default 1000000)",
	"EVS_QUOTA_PUBLISHABLE_PERCENT": "the share of the quota, in percent, an account's publishable keys may use (1-100, default 10)",
	"EVS_MAX_IDEMPOTENCY_KEYS":      "new Idempotency-Keys per account per UTC day; 0 or off = none (default 250000)",
	"EVS_MAX_CONNS":                 "open HTTP connections (default 1024)",
	"EVS_METRICS_ADDR":              "listen address of Prometheus /metrics (default: off)",
	"EVS_PROVIDER_SESSIONS":         "SMTP sessions at once per mail provider: N or class=N,provider=N",
	"EVS_PROVIDER_RCPT_PER_MIN":     "RCPT commands a minute per mail provider, same form",
	"EVS_PUBLIC_URL":                "https://host[:port] clients reach this server at, for upload URLs (default: the call's Host)",
	"EVS_MIN_FREE_BYTES":            "free bytes in the data directory below which new writes are refused and writes under way stop (default 1 GiB; 0 off)",
	"EVS_TRUSTED_PROXIES":           "CIDRs of proxies whose X-Forwarded-For is believed (default: none)",
	"EVS_TLS_CERT":                  "PEM certificate chain file: serve HTTPS (re-read on SIGHUP)",
	"EVS_TLS_KEY":                   "PEM private key file of EVS_TLS_CERT",
	"EVS_DRAIN_TIMEOUT":             "how long calls in flight may finish after SIGTERM (default 20s; 0 none)",
	"EVS_USAGE_PLAN_ID":             "default of --usage-plan (the stack's UsagePlanId output)",
	"EVS_API_KEY":                   "the API key (required)",
	"EVS_URL":                       "default of --url",
	"AWS_REGION":                    "with --dynamodb-table: the stack's region",
	"AWS_PROFILE":                   "with --dynamodb-table: the credentials profile (or AWS_ACCESS_KEY_ID...)",
	"AWS_ENDPOINT_URL":              "with --dynamodb-table: another AWS API endpoint (a local one)",

	// A key made with --rate or --rate-per-address has its own.
	"EVS_PUBLISHABLE_RATE":             "a publishable key's calls a minute from all addresses (default 600)",
	"EVS_PUBLISHABLE_RATE_PER_ADDRESS": "a publishable key's calls a minute from one client address (default 10)",
}

// Variable lists shared by several commands.
var (
	// engineEnv configures the verification engine.
	engineEnv = []string{"EVS_DNS_SERVERS", "EVS_SMTP", "EVS_SMTP_PROXY", "EVS_SMTP_PORT", "EVS_SMTP_HELO", "EVS_SMTP_FROM", "EVS_EGRESS_ALLOW",
		"EVS_SMTP_EXIT_TIMEOUT", "EVS_SMTP_EXIT_CANARY"}
	// storeEnv chooses the store of the keys and webhooks commands.
	storeEnv = []string{"EVS_DATA_DIR", "AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL"}
)

// usageTemplate is cobra's, with the environment a command reads after its
// flags.
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{with index .Annotations "env"}}

Environment:
{{.}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

// newVersionCmd is `evs version` (`evs --version` prints the first line).
func newVersionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version and the source revision it was built from",
		Long: `Prints the version, the source revision the binary was built from (with
"(modified)" when the checkout had uncommitted changes; "unknown" when the
build recorded none) and the Go version that built it. /metrics exports the
same as evs_build_info.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			in := config.ReadBuildInfo(version)
			rev := in.Revision
			if in.Modified {
				rev += " (modified)"
			}
			fmt.Fprintf(c.stdout, "evs %s\nrevision %s\n%s\n", in.Version, rev, in.GoVersion)
			return nil
		},
	}
}
