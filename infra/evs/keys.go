package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
)

// envUsagePlan names the variable that may hold the --usage-plan ID.
const envUsagePlan = "EVS_USAGE_PLAN_ID"

// keyStore opens the store the keys commands work on: DynamoDB when a table
// is named, else the embedded store (which `evs serve` may have open at the
// same time: SQLite in WAL mode allows it).
func keyStore(ctx context.Context, table string, getenv func(string) string) (store.Keys, func() error, error) {
	if table != "" {
		awsCfg, err := loadAWS(ctx)
		if err != nil {
			return nil, nil, err
		}
		ds := dynamoKeys(awsCfg, table)
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

func loadAWS(ctx context.Context) (aws.Config, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS configuration: %w", err)
	}
	return awsCfg, nil
}

func dynamoKeys(awsCfg aws.Config, table string) *dynamostore.Store {
	return dynamostore.New(dynamostore.Config{
		Client: dynamodb.NewFromConfig(awsCfg),
		Tables: dynamostore.Tables{Keys: table},
		Now:    time.Now,
	})
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
		planFlag := fs.String("usage-plan", "", "with --dynamodb-table: the stack's usage plan ID (output UsagePlanId; default $"+envUsagePlan+")")
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if *account == "" || fs.NArg() > 0 {
			return fmt.Errorf("%w: keys create --account NAME [--test] [--dynamodb-table TABLE --usage-plan PLAN_ID]", errUsage)
		}
		if *table == "" {
			if *planFlag != "" {
				return fmt.Errorf("%w: --usage-plan goes with --dynamodb-table (the embedded store has no API Gateway)", errUsage)
			}
			st, closeFn, err := keyStore(ctx, "", getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			return createKey(ctx, st, nil, *account, *test, stdout, stderr)
		}
		planID := *planFlag
		if planID == "" {
			cfg, err := config.FromEnv(getenv, false)
			if err != nil {
				return err
			}
			planID = cfg.UsagePlanID
		}
		if planID == "" {
			// Keys outside the plan would be refused by API Gateway (403):
			// every method requires an API key.
			return fmt.Errorf("%w: keys create --dynamodb-table needs --usage-plan PLAN_ID or $%s (the stack's UsagePlanId output)", errUsage, envUsagePlan)
		}
		awsCfg, err := loadAWS(ctx)
		if err != nil {
			return err
		}
		st := dynamoKeys(awsCfg, *table)
		defer st.Close()
		up := &usagePlan{api: apigateway.NewFromConfig(awsCfg), planID: planID, rand: rand.Reader}
		return createKey(ctx, st, up, *account, *test, stdout, stderr)
	case "revoke":
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: keys revoke KEY|ID [--dynamodb-table TABLE]", errUsage)
		}
		arg := fs.Arg(0)
		if authorizer.WellFormed(arg) {
			arg = authorizer.HashKey(arg)
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
		names := map[string]evs.Account{}
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

// createKey makes a key for the account called name, creating the account
// if needed, and prints the key alone on stdout. With up (AWS), the key
// carries the account's usage key; a usage key made here is removed again
// when the evs key cannot be stored, so a failure leaves nothing half-made
// in API Gateway.
func createKey(ctx context.Context, st store.Keys, up *usagePlan, name string, test bool, stdout, stderr io.Writer) error {
	if up != nil {
		// A wrong plan ID must not leave a new account behind.
		if err := up.check(ctx); err != nil {
			return err
		}
	}
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
		a = evs.Account{ID: uuid.NewString(), Name: name, Test: test, CreatedAt: time.Now().UTC()}
		if err := st.CreateAccount(ctx, a); err != nil {
			return fmt.Errorf("create account %q: %w", name, err)
		}
		fmt.Fprintf(stderr, "created account %q\n", name)
	default:
		return err
	}
	var uk usageKey
	if up != nil {
		stored, err := accountUsageKey(ctx, st, a.ID)
		if err != nil {
			return err
		}
		if uk, err = up.forAccount(ctx, a.ID, stored, stderr); err != nil {
			return err
		}
	}
	key, err := authorizer.IssueKey(ctx, st, a.ID, uk.value, time.Now())
	if err != nil {
		if uk.created {
			err = errors.Join(err, up.remove(ctx, uk.id))
		}
		return err
	}
	switch {
	case uk.created:
		fmt.Fprintf(stderr, "created API Gateway key %s in usage plan %s\n", uk.id, up.planID)
	case up != nil:
		fmt.Fprintf(stderr, "the key shares the account's API Gateway key %s in usage plan %s\n", uk.id, up.planID)
	}
	fmt.Fprintln(stdout, key)
	return nil
}

// accountUsageKey returns the usage key value the account's newest key
// carries, or "" when none of its keys has one. It scans every key, which
// suits an operator command.
func accountUsageKey(ctx context.Context, st store.Keys, accountID string) (string, error) {
	ks, err := st.ListKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("list keys: %w", err)
	}
	usage := ""
	for _, k := range ks { // oldest first: the last one found is the newest
		if k.AccountID == accountID && k.UsageKeyID != "" {
			usage = k.UsageKeyID
		}
	}
	return usage, nil
}
