package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/webhook"
)

// newOutcomesCmd is `evs outcomes sns-url`.
func newOutcomesCmd(c *cli) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "outcomes",
		Short: "print the URL an SNS subscription posts an account's SES notifications to",
	})
	var table, account, base string
	snsURL := &cobra.Command{
		Use:   "sns-url --account NAME",
		Short: "print the account's POST /v1/outcomes/sns URL, for an SNS HTTPS subscription",
		Long: `Prints the URL of POST /v1/outcomes/sns for the account alone on stdout:
subscribe it (protocol HTTPS) to the SNS topic an SES identity or
configuration set sends its notifications to. SNS sends no API key: the
URL's token names the account. It is made from the account's webhook
secret (created on first use), so rotating that secret ("evs webhooks
secret --rotate") changes it; the old URL keeps working for 24 hours.
The origin is --base-url, else EVS_PUBLIC_URL.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if account == "" {
				return usageErrorf("--account must name an account")
			}
			base = cmp.Or(base, c.getenv("EVS_PUBLIC_URL"))
			if base == "" {
				return usageErrorf("--base-url (or EVS_PUBLIC_URL) must give the origin SNS reaches this server at, like https://evs.example.com")
			}
			return printSNSURL(c.ctx, table, account, base, c.stdout, c.getenv)
		},
	}
	snsURL.Flags().StringVar(&account, "account", "", "the account's `NAME`")
	snsURL.Flags().StringVar(&base, "base-url", "", "the server's public origin, like https://evs.example.com (default EVS_PUBLIC_URL)")
	tableFlag(snsURL, &table)
	_ = snsURL.MarkFlagRequired("account")
	cmd.AddCommand(withEnv(snsURL, append([]string{"EVS_PUBLIC_URL"}, storeEnv...)...))
	return cmd
}

// printSNSURL prints the account's SNS endpoint URL under base.
func printSNSURL(ctx context.Context, table, account, base string, stdout io.Writer, getenv func(string) string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return usageErrorf("the base URL must be like https://evs.example.com")
	}
	st, acct, closeFn, err := secretsOf(ctx, table, account, getenv)
	if err != nil {
		return err
	}
	defer closeFn()
	s, err := webhook.Secret(ctx, st, acct.ID)
	if err != nil {
		return err
	}

	q := url.Values{"account": {acct.ID}, "token": {api.SNSToken(s.Current, acct.ID)}}
	fmt.Fprintln(stdout, strings.TrimRight(base, "/")+"/v1/outcomes/sns?"+q.Encode())
	return nil
}
