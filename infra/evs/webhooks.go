package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/webhook"
)

// newWebhooksCmd is `evs webhooks secret`.
func newWebhooksCmd(c *cli) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "webhooks",
		Short: "print or rotate an account's webhook signing secret",
	})
	var (
		table, account string
		rotate         bool
	)
	secret := &cobra.Command{
		Use:   "secret --account NAME",
		Short: "print (or rotate) the account's webhook signing secret",
		Long: `Prints the account's webhook signing secret (whsec_...) alone on stdout,
creating it on first use. --rotate replaces it; for 24 hours events are
signed with both the new and the old secret.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if account == "" {
				return usageErrorf("--account must name an account")
			}
			return webhookSecret(c.ctx, table, account, rotate, c.stdout, c.stderr, c.getenv)
		},
	}
	secret.Flags().StringVar(&account, "account", "", "the account's `NAME`")
	secret.Flags().BoolVar(&rotate, "rotate", false, "replace the secret (the old one still signs for 24 hours)")
	tableFlag(secret, &table)
	_ = secret.MarkFlagRequired("account")
	cmd.AddCommand(withEnv(secret, storeEnv...))
	return cmd
}

// webhookSecret prints the account's signing secret alone on stdout,
// creating it on first use; rotate replaces it, and the old one keeps
// signing beside it for 24 h.
func webhookSecret(ctx context.Context, table, account string, rotate bool, stdout, stderr io.Writer, getenv func(string) string) error {
	st, acct, closeFn, err := secretsOf(ctx, table, account, getenv)
	if err != nil {
		return err
	}
	defer closeFn()
	var s evs.WebhookSecret
	if rotate {
		s, err = webhook.Rotate(ctx, st, acct.ID, time.Now())
	} else {
		s, err = webhook.Secret(ctx, st, acct.ID)
	}
	if err != nil {
		return err
	}
	if rotate {
		fmt.Fprintln(stderr, "evs: rotated; events are signed with the old secret too for 24 hours")
	}
	fmt.Fprintln(stdout, s.Current)
	return nil
}

// secretStore is a store that keeps the accounts' webhook secrets.
type secretStore interface {
	store.Keys
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
	PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
}

// secretsOf opens the key store (table on AWS, else the data directory)
// and finds account by name, for the commands that read its webhook
// secret; closeFn closes the store.
func secretsOf(ctx context.Context, table, account string, getenv func(string) string) (st secretStore, acct evs.Account, closeFn func() error, err error) {
	ks, closeFn, err := keyStore(ctx, table, getenv)
	if err != nil {
		return nil, evs.Account{}, nil, err
	}
	st, ok := ks.(secretStore)
	if !ok {
		closeFn()
		return nil, evs.Account{}, nil, fmt.Errorf("this store keeps no webhook secrets")
	}
	if acct, err = st.AccountByName(ctx, account); err != nil {
		closeFn()
		return nil, evs.Account{}, nil, fmt.Errorf("account %q: %w", account, err)
	}
	return st, acct, closeFn, nil
}
