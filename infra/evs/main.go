// Command evs is the operator tool of the email verification service:
//
//	evs serve                          the whole API on one machine
//	evs backup DEST                    copy the embedded store while serve runs
//	evs keys create --account NAME     make an API key (printed alone on stdout)
//	evs keys revoke KEY|ID             revoke a key
//	evs keys list                      list keys (ids, never secrets)
//	evs verify ADDRESS... [--mode quick|full]
//	                                   the engine alone: one JSON decision per line
//	evs batch FILE.csv --url URL       verify a CSV through the API (key in EVS_API_KEY)
//	evs webhooks secret --account NAME [--rotate]
//	                                   print (or rotate) the webhook signing secret
//	evs completion bash|zsh|fish       shell completion
//	evs version
//
// and, for developers:
//
//	evs sam-local-init [--env-vars FILE] [--endpoint URL]
//	                                   ready moto_server for make sam-local
//
// `evs <command> --help` lists every flag and the environment variables the
// command reads (EVS_*, the same ones the Lambda functions read).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/evs-dev/evs/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr, getenv: config.OSEnv, environ: os.Environ}
	code := execute(newRoot(c), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
