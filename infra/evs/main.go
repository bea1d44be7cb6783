// Command evs is the operator tool of the email verification service:
//
//	evs serve                          the whole API on one machine
//	evs keys create --account NAME     make an API key (printed alone on stdout)
//	evs keys revoke KEY|ID             revoke a key
//	evs keys list                      list keys (ids, never secrets)
//	evs verify [--mode quick|full] ADDRESS...
//	                                   the engine alone: one JSON decision per line
//	evs batch FILE.csv --url URL       verify a CSV through the API (key in EVS_API_KEY)
//	evs webhooks secret --account NAME [--rotate]
//	                                   print (or rotate) the webhook signing secret
//	evs version
//
// and, for developers:
//
//	evs sam-local-init [--env-vars FILE] [--endpoint URL]
//	                                   ready moto_server for make sam-local
//
// Configuration comes from the environment (EVS_*), the same variables the
// Lambda functions read; see the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/evs-dev/evs/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: evs <command> [arguments]

commands:
  serve                                   run the whole API on this machine
  keys create --account NAME [--test]     create an API key (printed once, alone on stdout)
  keys revoke KEY|ID                      revoke a key
  keys list                               list keys
  verify [--mode quick|full] ADDRESS...   verify addresses with the engine alone
  batch FILE.csv --url URL [--callback URL]
                                          verify a CSV file through the API (key from EVS_API_KEY)
  webhooks secret --account NAME [--rotate]
                                          print (or rotate) the account's webhook signing secret
  version                                 print the version

keys and webhooks commands use the embedded store in EVS_DATA_DIR, or DynamoDB with
--dynamodb-table TABLE and, for create, --usage-plan PLAN_ID (or
EVS_USAGE_PLAN_ID; the stack's UsagePlanId output), with the usual AWS
configuration.

development (make sam-local):
  sam-local-init [--env-vars FILE] [--endpoint URL]
                                          create the tables, queue and usage plan of
                                          infra/sam/env.json on moto_server (--help)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, config.OSEnv)
	stop()
	os.Exit(code)
}

// errUsage marks a command-line mistake: usage goes to stderr, exit code 2.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr, getenv)
	case "keys":
		err = keys(ctx, args[1:], stdout, stderr, getenv)
	case "verify":
		err = verifyCmd(ctx, args[1:], stdout, stderr, getenv)
	case "batch":
		err = batchCmd(ctx, args[1:], stdout, stderr, getenv)
	case "webhooks":
		err = webhooksCmd(ctx, args[1:], stdout, stderr, getenv)
	case "sam-local-init":
		err = samLocalInit(ctx, args[1:], stdout)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "evs", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "evs: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "evs: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "evs: %v\n", err)
		return 1
	}
}
