package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/apikey"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
)

// keyStore opens the store the keys commands work on: DynamoDB when a table
// is named, else the embedded store (which `evs serve` may have open at the
// same time: SQLite in WAL mode allows it).
func keyStore(ctx context.Context, table string, getenv func(string) string) (store.Keys, func() error, error) {
	if table != "" {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("AWS configuration: %w", err)
		}
		ds := dynamostore.New(dynamostore.Config{
			Client: dynamodb.NewFromConfig(awsCfg),
			Tables: dynamostore.Tables{Keys: table},
			Now:    time.Now,
		})
		return ds, ds.Close, nil
	}
	cfg, err := config.FromEnv(getenv, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlitestore.Open(ctx, cfg.DataDir, time.Now)
	if err != nil {
		return nil, nil, fmt.Errorf("open the store in %s: %w", cfg.DataDir, err)
	}
	return st, st.Close, nil
}

func keys(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: keys needs create, revoke or list", errUsage)
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	table := fs.String("dynamodb-table", "", "manage keys in this DynamoDB keys table instead of the embedded store")
	switch args[0] {
	case "create":
		account := fs.String("account", "", "account name (created if it does not exist)")
		test := fs.Bool("test", false, "create the account in test mode (sandbox verdicts, no network)")
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if *account == "" || fs.NArg() > 0 {
			return fmt.Errorf("%w: keys create --account NAME [--test] [--dynamodb-table TABLE]", errUsage)
		}
		st, closeFn, err := keyStore(ctx, *table, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		return createKey(ctx, st, *account, *test, stdout, stderr)
	case "revoke":
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: keys revoke KEY|ID [--dynamodb-table TABLE]", errUsage)
		}
		arg := fs.Arg(0)
		if apikey.WellFormed(arg) {
			arg = apikey.Hash(arg)
		}
		st, closeFn, err := keyStore(ctx, *table, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		k, err := st.RevokeKey(ctx, arg, time.Now())
		if err != nil {
			if evs.ErrorCode(err) == evs.CodeNotFound {
				return fmt.Errorf("no such key")
			}
			return err
		}
		fmt.Fprintf(stdout, "revoked key %s\n", k.ID)
		return nil
	case "list":
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		st, closeFn, err := keyStore(ctx, *table, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		ks, err := st.ListKeys(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tACCOUNT\tMODE\tSTATUS\tCREATED")
		names := map[string]store.Account{}
		for _, k := range ks {
			a, ok := names[k.AccountID]
			if !ok {
				a, _ = st.Account(ctx, k.AccountID)
				names[k.AccountID] = a
			}
			mode, status := "live", "active"
			if a.Test {
				mode = "test"
			}
			if k.Revoked {
				status = "revoked"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, a.Name, mode, status, k.CreatedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	default:
		return fmt.Errorf("%w: unknown keys command %q (create, revoke, list)", errUsage, args[0])
	}
}

func createKey(ctx context.Context, st store.Keys, name string, test bool, stdout, stderr io.Writer) error {
	a, err := st.AccountByName(ctx, name)
	switch {
	case err == nil:
		if a.Test != test {
			mode := "live"
			if a.Test {
				mode = "test-mode"
			}
			return fmt.Errorf("account %q exists and is a %s account; its keys share its mode", name, mode)
		}
	case evs.ErrorCode(err) == evs.CodeNotFound:
		a = store.Account{ID: uuid.NewString(), Name: name, Test: test, CreatedAt: time.Now().UTC()}
		if err := st.CreateAccount(ctx, a); err != nil {
			return fmt.Errorf("create account %q: %w", name, err)
		}
		fmt.Fprintf(stderr, "created account %q\n", name)
	default:
		return err
	}
	key, err := server.CreateKey(ctx, st, a.ID, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, key)
	return nil
}
