package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/webhook"
)

// webhooksCmd is `evs webhooks secret --account NAME [--rotate]`: it prints
// the account's signing secret alone on stdout, creating it on first use;
// --rotate replaces it, and the old one keeps signing beside it for 24 h.
func webhooksCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "secret" {
		return fmt.Errorf("%w: webhooks secret --account NAME [--rotate] [--dynamodb-table TABLE]", errUsage)
	}
	fs := flag.NewFlagSet("webhooks secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	table := fs.String("dynamodb-table", "", "use this DynamoDB keys table instead of the embedded store")
	account := fs.String("account", "", "account name")
	rotate := fs.Bool("rotate", false, "replace the secret (the old one still signs for 24 hours)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *account == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: webhooks secret --account NAME [--rotate] [--dynamodb-table TABLE]", errUsage)
	}
	ks, closeFn, err := keyStore(ctx, *table, getenv)
	if err != nil {
		return err
	}
	defer closeFn()
	st, ok := ks.(interface {
		store.Keys
		WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
		PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
	})
	if !ok {
		return fmt.Errorf("this store keeps no webhook secrets")
	}
	acct, err := st.AccountByName(ctx, *account)
	if err != nil {
		return fmt.Errorf("account %q: %w", *account, err)
	}
	var s evs.WebhookSecret
	if *rotate {
		s, err = webhook.Rotate(ctx, st, acct.ID, time.Now())
	} else {
		s, err = webhook.Secret(ctx, st, acct.ID)
	}
	if err != nil {
		return err
	}
	if *rotate {
		fmt.Fprintln(stderr, "evs: rotated; events are signed with the old secret too for 24 hours")
	}
	fmt.Fprintln(stdout, s.Current)
	return nil
}
