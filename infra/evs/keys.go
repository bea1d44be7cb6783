package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
)

// envUsagePlan names the variable that may hold the --usage-plan ID.
const envUsagePlan = "EVS_USAGE_PLAN_ID"

// keyStore opens the store the keys commands work on: DynamoDB when a table
// is named, else the embedded store (which `evs serve` may have open at the
// same time: SQLite in WAL mode allows it; a database older than this
// program is migrated only when no server holds it).
func keyStore(ctx context.Context, table string, getenv func(string) string) (store.Keys, func() error, error) {
	if table != "" {
		_, ds, err := openDynamoKeys(ctx, table)
		if err != nil {
			return nil, nil, err
		}
		return ds, ds.Close, nil
	}
	cfg, err := config.FromEnv(getenv, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlitestore.Open(ctx, cfg.DataDir, time.Now)
	if errors.Is(err, sqlitestore.ErrInUse) {
		return nil, nil, err // one line that names the directory and what to do
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open the store in %s: %w", cfg.DataDir, err)
	}
	return st, st.Close, nil
}

// openDynamoKeys loads the AWS configuration and checks that the region and
// the keys table are there, so a wrong name is one line saying what to do.
func openDynamoKeys(ctx context.Context, table string) (aws.Config, *dynamostore.Store, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, nil, fmt.Errorf("AWS configuration: %w", err)
	}
	err = lambda.Check(ctx, awsCfg, lambda.Resources{
		Tables: []lambda.Resource{{Name: table, Source: "--dynamodb-table"}},
		Fix:    "pass the stack's KeysTable output (sam list stack-outputs), or deploy the stack (sam deploy)",
		// A person waits for this command: a slow answer still tells a
		// missing table from an unavailable one.
		Within: 15 * time.Second,
	})
	if err != nil {
		return aws.Config{}, nil, err
	}
	return awsCfg, dynamostore.New(dynamostore.Config{
		Client: dynamodb.NewFromConfig(awsCfg), Tables: dynamostore.Tables{Keys: table}, Now: time.Now,
	}), nil
}

// newKeysCmd is `evs keys create|revoke|list`.
func newKeysCmd(c *cli) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "keys",
		Short: "create, revoke and list API keys",
		Long: `Manages API keys in the embedded store (EVS_DATA_DIR; works while evs serve
runs), or in a deployed stack's DynamoDB keys table with --dynamodb-table.
A store older than this evs is migrated first, but never while an evs
serve holds it: that is refused, in one line.`,
	})
	cmd.AddCommand(newKeysCreateCmd(c), newKeysRevokeCmd(c), newKeysListCmd(c))
	return cmd
}

// tableFlag adds --dynamodb-table to cmd.
func tableFlag(cmd *cobra.Command, table *string) {
	cmd.Flags().StringVar(table, "dynamodb-table", "", "use this DynamoDB keys `TABLE` (the stack's KeysTable output) instead of the embedded store")
}

func newKeysCreateCmd(c *cli) *cobra.Command {
	var (
		table, account, plan string
		test                 bool
		spec                 keySpec
	)
	cmd := &cobra.Command{
		Use:   "create --account NAME",
		Short: "create an API key (printed once, alone on stdout)",
		Long: `Creates an API key for the account NAME, creating the account if needed, and
prints the key alone on stdout; it is stored hashed and cannot be shown
again. A test-mode account (--test) gets sandbox verdicts and touches no
network; an account's keys all share its mode.

With --publishable the key (evs_pk.…) is one a web page may hold: it may
call only POST /v1/verify, only from the pages of its --origin (each
scheme://host[:port]; https, or http for localhost), gets a trimmed reply
decided without the account's reported outcomes, uses at most the publishable
keys' share of the account's quota (EVS_QUOTA_PUBLISHABLE_PERCENT), and is
rate-limited per client address and per key: by default 10 and 600 calls a
minute (EVS_PUBLISHABLE_RATE_PER_ADDRESS, EVS_PUBLISHABLE_RATE), or
--rate-per-address and --rate (docs/security.md); the
<script> tag of the widget that uses it is printed on stderr (docs/widget.md).

With --dynamodb-table the key goes to a deployed stack, and into its API
Gateway usage plan (--usage-plan, or EVS_USAGE_PLAN_ID) on the usage key of
the account's keys of its kind: publishable keys never spend the secret
keys' calls a day.`,
		Example: `  evs keys create --account acme
  evs keys create --account sandbox --test
  evs keys create --account acme --publishable --origin https://shop.example --origin https://www.shop.example
  evs keys create --account acme --publishable --origin https://shop.example --rate 1200 --rate-per-address 5
  evs keys create --account acme --dynamodb-table evs-KeysTable-XYZ --usage-plan abc123`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			return keysCreate(c, table, account, plan, test, spec)
		},
	}
	cmd.Flags().StringVar(&account, "account", "", "the account's `NAME` (created if it does not exist)")
	cmd.Flags().BoolVar(&spec.publishable, "publishable", false, "make a publishable key for web pages (needs --origin)")
	cmd.Flags().StringArrayVar(&spec.origins, "origin", nil, "with --publishable: a web `ORIGIN` the key is accepted from (repeat for more)")
	cmd.Flags().IntVar(&spec.limits.PerKey, "rate", 0, "with --publishable: the key's `CALLS` a minute from all addresses (default: the service's EVS_PUBLISHABLE_RATE, 600)")
	cmd.Flags().IntVar(&spec.limits.PerAddress, "rate-per-address", 0, "with --publishable: the key's `CALLS` a minute from one client address (default: the service's EVS_PUBLISHABLE_RATE_PER_ADDRESS, 10)")
	cmd.Flags().BoolVar(&test, "test", false, "create the account in test mode (sandbox verdicts, no network)")
	cmd.Flags().StringVar(&plan, "usage-plan", "", "with --dynamodb-table: the stack's usage plan `ID` (output UsagePlanId; default $"+envUsagePlan+")")
	tableFlag(cmd, &table)
	_ = cmd.MarkFlagRequired("account")
	return withEnv(cmd, append(storeEnv, envUsagePlan, "EVS_PUBLIC_URL", "EVS_ADDR")...)
}

// keySpec is what `keys create` is asked to make beyond the account.
type keySpec struct {
	publishable bool
	origins     []string
	limits      evs.KeyLimits
	// serveURL is where evs serve is reached (EVS_PUBLIC_URL, else
	// EVS_ADDR), for the widget's tag printed with a publishable key.
	serveURL string
}

// key is the evs.Key of spec, for authorizer.Issue.
func (s keySpec) key() evs.Key {
	if !s.publishable {
		return evs.Key{}
	}
	return evs.Key{Kind: evs.KeyPublishable, Origins: s.origins, Limits: s.limits}
}

func keysCreate(c *cli, table, account, planFlag string, test bool, spec keySpec) error {
	ctx, stdout, stderr := c.ctx, c.stdout, c.stderr
	if account == "" {
		return usageErrorf("--account must name an account")
	}
	// Checked before anything is made: a bad origin leaves no account.
	switch {
	case !spec.publishable && (len(spec.origins) > 0 || spec.limits != evs.KeyLimits{}):
		return usageErrorf("--origin, --rate and --rate-per-address go with --publishable (a secret key is never used from a web page)")
	case spec.limits.PerKey < 0 || spec.limits.PerAddress < 0:
		return usageErrorf("--rate and --rate-per-address are calls a minute, 1 or more")
	case spec.publishable:
		if _, err := authorizer.CheckOrigins(spec.origins); err != nil {
			return usageErrorf("--origin: %s", evs.ErrorMessage(err))
		}
	}
	if table == "" {
		if planFlag != "" {
			return usageErrorf("--usage-plan goes with --dynamodb-table (the embedded store has no API Gateway)")
		}
		st, closeFn, err := keyStore(ctx, "", c.getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		spec.serveURL = cmp.Or(c.getenv("EVS_PUBLIC_URL"), "http://"+cmp.Or(c.getenv("EVS_ADDR"), config.DefaultAddr))
		return createKey(ctx, st, nil, account, test, spec, stdout, stderr)
	}
	planID := planFlag
	if planID == "" {
		cfg, err := config.FromEnv(c.getenv, false)
		if err != nil {
			return err
		}
		planID = cfg.UsagePlanID
	}
	if planID == "" {
		// Keys outside the plan would be refused by API Gateway (403):
		// every method requires an API key.
		return usageErrorf("keys create --dynamodb-table needs --usage-plan PLAN_ID or $%s (the stack's UsagePlanId output)", envUsagePlan)
	}
	awsCfg, st, err := openDynamoKeys(ctx, table)
	if err != nil {
		return err
	}
	defer st.Close()
	up := &usagePlan{api: apigateway.NewFromConfig(awsCfg), planID: planID, rand: rand.Reader}
	return createKey(ctx, st, up, account, test, spec, stdout, stderr)
}

func newKeysRevokeCmd(c *cli) *cobra.Command {
	var table string
	cmd := &cobra.Command{
		Use:   "revoke KEY|ID",
		Short: "revoke a key, named by the key itself or its id (evs keys list)",
		Long: `Revokes a key, named by the key itself or by its id (as evs keys list shows
it), or by the start of its id, four characters or more, that no other key's
id starts with. A running evs serve refuses the key from its next call. On AWS
(--dynamodb-table), API Gateway may accept it for up to 30 s more: it caches
the authorizer's answer per key.`,
		Args: argsFrom(1, 1, "one key or key id"),
		RunE: func(_ *cobra.Command, args []string) error {
			return keysRevoke(c, table, args[0])
		},
	}
	tableFlag(cmd, &table)
	return withEnv(cmd, storeEnv...)
}

func keysRevoke(c *cli, table, arg string) error {
	// Only a key ID, never anything that may be a key, is named back.
	isID := idRe.MatchString(arg)
	if authorizer.WellFormed(arg) {
		arg = authorizer.HashKey(arg)
	}
	st, closeFn, err := keyStore(c.ctx, table, c.getenv)
	if err != nil {
		return err
	}
	defer closeFn()
	k, err := st.RevokeKey(c.ctx, arg, time.Now())
	if evs.ErrorCode(err) == evs.CodeNotFound && isID && len(arg) >= minIDPrefix {
		// Not a whole ID: its start, as a user copies it from evs keys
		// list, if it names one key.
		var id string
		if id, err = keyByPrefix(c.ctx, st, arg); err != nil {
			return err
		}
		k, err = st.RevokeKey(c.ctx, id, time.Now())
	}
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return errors.New("no such key")
		}
		return err
	}
	fmt.Fprintf(c.stdout, "revoked key %s\n", k.ID)
	if table != "" {
		// evs serve refuses the key from its next call; API Gateway keeps
		// each key's authorizer answer for ReauthorizeEvery.
		fmt.Fprintf(c.stderr, "evs: API Gateway may still accept this key for up to %d s: it caches the authorizer's answer per key (ReauthorizeEvery in template.yaml)\n", awsAuthorizerCacheSeconds)
	}
	return nil
}

// idRe matches a key ID or the start of one: hex, as evs keys list shows.
var idRe = regexp.MustCompile(`^[0-9a-f]{1,12}$`)

// minIDPrefix is the shortest start of a key ID that revoke takes; a
// collision is refused, never guessed.
const minIDPrefix = 4

// keyByPrefix returns the ID of the one key whose ID starts with prefix.
func keyByPrefix(ctx context.Context, st store.Keys, prefix string) (string, error) {
	ks, err := st.ListKeys(ctx)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, k := range ks {
		if strings.HasPrefix(k.ID, prefix) {
			ids = append(ids, k.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no such key, and no key id starts with %q (evs keys list shows them)", prefix)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("%d key ids start with %q (%s): give more of the id", len(ids), prefix, strings.Join(ids, ", "))
}

// awsAuthorizerCacheSeconds is how long API Gateway caches the authorizer's
// answer for a key (ReauthorizeEvery in template.yaml; a test holds the two
// equal), so how long a key revoked there may still work.
const awsAuthorizerCacheSeconds = 30

func newKeysListCmd(c *cli) *cobra.Command {
	var table string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list keys: ids, accounts, modes, states (never the keys)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return keysList(c, table)
		},
	}
	tableFlag(cmd, &table)
	return withEnv(cmd, storeEnv...)
}

func keysList(c *cli, table string) error {
	ctx := c.ctx
	st, closeFn, err := keyStore(ctx, table, c.getenv)
	if err != nil {
		return err
	}
	defer closeFn()
	ks, err := st.ListKeys(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCOUNT\tMODE\tSTATUS\tCREATED\tKIND\tORIGINS\tRATE")
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
		kind, origins, limits := "secret", "-", "-"
		if k.Kind == evs.KeyPublishable {
			// Calls a minute per client address / per key; 0 is the default.
			kind, origins = "publishable", strings.Join(k.Origins, ",")
			limits = fmt.Sprintf("%d/%d", k.Limits.PerAddress, k.Limits.PerKey)
		}
		// The new columns come last: scripts reading the first five
		// keep working.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, a.Name, mode, status, k.CreatedAt.UTC().Format(time.RFC3339), kind, origins, limits)
	}
	return tw.Flush()
}

// createKey makes a key for the account called name, creating the account
// if needed, and prints the key alone on stdout. With up (AWS), the key
// carries the account's usage key; one made here is removed again when the
// evs key cannot be stored.
func createKey(ctx context.Context, st store.Keys, up *usagePlan, name string, test bool, spec keySpec, stdout, stderr io.Writer) error {
	if up != nil {
		// A wrong plan ID must not leave a new account behind.
		pub, err := up.check(ctx)
		if err != nil {
			return err
		}
		if spec.publishable {
			up = pub
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
		stored, err := accountUsageKey(ctx, st, a.ID, spec.key().Kind)
		if err != nil {
			return err
		}
		if uk, err = up.forAccount(ctx, a.ID, spec.key().Kind, stored, stderr); err != nil {
			return err
		}
	}
	k := spec.key()
	k.AccountID, k.UsageKeyID = a.ID, uk.value
	key, err := authorizer.Issue(ctx, st, k, time.Now())
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
		fmt.Fprintf(stderr, "the key shares API Gateway key %s in usage plan %s with the account's other %s keys\n", uk.id, up.planID, cmp.Or(string(k.Kind), "secret"))
	}
	fmt.Fprintln(stdout, key)
	if spec.publishable {
		// The key exists to be put in a page: say how, with the key (it
		// is no secret) and where the script is served.
		src := "SERVICE/widget.js, SERVICE being the stack's WidgetUrl output without /widget.js"
		if up == nil {
			src = spec.serveURL + "/widget.js"
		}
		fmt.Fprintf(stderr, "add it to your pages' <head> (docs/widget.md):\n  <script src=\"%s\" data-key=\"%s\"></script>\n", src, key)
	}
	return nil
}

// accountUsageKey returns the usage key value the account's newest key of
// kind carries, or "" when none has one of its own: publishable keys made
// before they had theirs carry the secret keys', never to be shared again.
// It scans every key, which suits an operator command.
func accountUsageKey(ctx context.Context, st store.Keys, accountID string, kind evs.KeyKind) (string, error) {
	ks, err := st.ListKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("list keys: %w", err)
	}
	usage, others := "", map[string]bool{}
	for _, k := range ks { // oldest first: the last one found is the newest
		if k.AccountID == accountID && k.UsageKeyID != "" {
			if k.Kind == kind {
				usage = k.UsageKeyID
			} else {
				others[k.UsageKeyID] = true
			}
		}
	}
	if kind == evs.KeyPublishable && others[usage] {
		return "", nil
	}
	return usage, nil
}
