package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/apigateway/types"

	"github.com/evs-dev/evs/internal/evs"
)

// API Gateway enforces a usage plan only for a usage identifier that is an
// API Gateway key's value in the plan. Clients never see that key: the
// authorizer returns the one of the caller's evs key (evs.Key.UsageKeyID).
// An account has two, one its secret keys share and one its publishable
// keys share, metered apart: a copied page key, flooded, spends only its
// own throttle and quota.

// usagePlanAPI is what `evs keys create` needs of API Gateway.
type usagePlanAPI interface {
	GetUsagePlan(ctx context.Context, in *apigateway.GetUsagePlanInput, opts ...func(*apigateway.Options)) (*apigateway.GetUsagePlanOutput, error)
	GetApiKeys(ctx context.Context, in *apigateway.GetApiKeysInput, opts ...func(*apigateway.Options)) (*apigateway.GetApiKeysOutput, error)
	GetUsagePlanKey(ctx context.Context, in *apigateway.GetUsagePlanKeyInput, opts ...func(*apigateway.Options)) (*apigateway.GetUsagePlanKeyOutput, error)
	CreateApiKey(ctx context.Context, in *apigateway.CreateApiKeyInput, opts ...func(*apigateway.Options)) (*apigateway.CreateApiKeyOutput, error)
	CreateUsagePlanKey(ctx context.Context, in *apigateway.CreateUsagePlanKeyInput, opts ...func(*apigateway.Options)) (*apigateway.CreateUsagePlanKeyOutput, error)
	DeleteApiKey(ctx context.Context, in *apigateway.DeleteApiKeyInput, opts ...func(*apigateway.Options)) (*apigateway.DeleteApiKeyOutput, error)
}

// usageValueBytes random bytes make the 40 base64url characters of a usage
// key value (API Gateway wants at least 20).
const usageValueBytes = 30

// cleanupTimeout bounds the removal of a half-made usage key, which runs
// even when the command's context is already cancelled.
const cleanupTimeout = 15 * time.Second

// usagePlan hands out the API Gateway API keys that put accounts under one
// usage plan.
type usagePlan struct {
	api    usagePlanAPI
	planID string
	rand   io.Reader // of key values: crypto/rand in the command
}

// usageKey is an account's API Gateway API key.
type usageKey struct {
	id      string // API Gateway's identifier of the key (not secret)
	value   string // the authorizer's usage identifier key; never printed
	created bool   // made by this command, so removed if the evs key cannot be stored
}

// usageKeyName names the API Gateway key of an account's keys of kind,
// so it is found again and the console shows whose key it is.
func usageKeyName(accountID string, kind evs.KeyKind) string {
	if kind == evs.KeyPublishable {
		return "evs-pk-" + accountID
	}
	return "evs-" + accountID
}

// publishablePlanTag, on the stack's usage plan, names the plan of the
// publishable keys' usage keys (template.yaml); a plan without it (an
// older stack, sam local) takes both kinds, on usage keys apart.
const publishablePlanTag = "evs:publishable-usage-plan"

// check fails when the plan does not exist, before anything is created,
// and returns the plan of publishable keys' usage keys.
func (u *usagePlan) check(ctx context.Context) (*usagePlan, error) {
	out, err := u.api.GetUsagePlan(ctx, &apigateway.GetUsagePlanInput{UsagePlanId: aws.String(u.planID)})
	if _, ok := errors.AsType[*types.NotFoundException](err); ok {
		return nil, fmt.Errorf("usage plan %s does not exist (use the stack's UsagePlanId output): %w", u.planID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("look up usage plan %s: %w", u.planID, err)
	}
	if id := out.Tags[publishablePlanTag]; id != "" {
		return &usagePlan{api: u.api, planID: id, rand: u.rand}, nil
	}
	return u, nil
}

// forAccount returns the usage key of the account's keys of kind: stored,
// while API Gateway still has it (put back in the plan if it left), else a
// new one, and then warn is told if stored's keys are now refused.
func (u *usagePlan) forAccount(ctx context.Context, accountID string, kind evs.KeyKind, stored string, warn io.Writer) (usageKey, error) {
	name := usageKeyName(accountID, kind)
	if stored != "" {
		id, err := u.find(ctx, name, stored)
		if err != nil {
			return usageKey{}, err
		}
		if id != "" {
			if err := u.ensureInPlan(ctx, id); err != nil {
				return usageKey{}, err
			}
			return usageKey{id: id, value: stored}, nil
		}
		fmt.Fprintf(warn, "warning: the usage key of the account's existing keys is gone from API Gateway; those keys are refused (403) until replaced: create new ones and revoke the old\n")
	}
	return u.create(ctx, name)
}

// find returns the id of the API Gateway key called name whose value is
// value, or "" when there is none.
func (u *usagePlan) find(ctx context.Context, name, value string) (string, error) {
	p := apigateway.NewGetApiKeysPaginator(u.api, &apigateway.GetApiKeysInput{
		NameQuery:     aws.String(name),
		IncludeValues: aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("look up API Gateway key %s: %w", name, err)
		}
		for _, k := range out.Items {
			// NameQuery may match more than the exact name.
			if aws.ToString(k.Name) == name && aws.ToString(k.Value) == value {
				return aws.ToString(k.Id), nil
			}
		}
	}
	return "", nil
}

// ensureInPlan adds API key id to the plan unless it is in it already.
func (u *usagePlan) ensureInPlan(ctx context.Context, id string) error {
	_, err := u.api.GetUsagePlanKey(ctx, &apigateway.GetUsagePlanKeyInput{UsagePlanId: aws.String(u.planID), KeyId: aws.String(id)})
	if _, missing := errors.AsType[*types.NotFoundException](err); missing {
		return u.addToPlan(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("look up API Gateway key %s in usage plan %s: %w", id, u.planID, err)
	}
	return nil
}

func (u *usagePlan) addToPlan(ctx context.Context, id string) error {
	_, err := u.api.CreateUsagePlanKey(ctx, &apigateway.CreateUsagePlanKeyInput{
		UsagePlanId: aws.String(u.planID),
		KeyId:       aws.String(id),
		KeyType:     aws.String("API_KEY"),
	})
	if err != nil {
		return fmt.Errorf("add API Gateway key %s to usage plan %s: %w", id, u.planID, err)
	}
	return nil
}

// create makes an enabled API Gateway key called name (usageKeyName) with
// a random value and adds it to the plan; a key that cannot join the plan
// is removed again.
func (u *usagePlan) create(ctx context.Context, name string) (usageKey, error) {
	value, err := newUsageValue(u.rand)
	if err != nil {
		return usageKey{}, err
	}
	out, err := u.api.CreateApiKey(ctx, &apigateway.CreateApiKeyInput{
		Name:        aws.String(name),
		Description: aws.String("evs usage-plan key; the authorizer supplies it, clients never send it"),
		Enabled:     true,
		Value:       aws.String(value),
	})
	var id string
	if err == nil {
		id = aws.ToString(out.Id)
	} else if _, conflict := errors.AsType[*types.ConflictException](err); conflict {
		// The SDK resends a create whose reply was lost; API Gateway
		// (or moto) then reports our own key as a conflict. Its random
		// value tells it from a key someone else made.
		if own, ferr := u.find(ctx, name, value); ferr == nil && own != "" {
			id, err = own, nil
		}
	}
	if err != nil {
		return usageKey{}, fmt.Errorf("create API Gateway key %s: %w", name, err)
	}
	k := usageKey{id: id, value: value, created: true}
	if err := u.addToPlan(ctx, k.id); err != nil {
		return usageKey{}, errors.Join(err, u.remove(ctx, k.id))
	}
	return k, nil
}

// remove deletes API key id, even when the command is being interrupted.
func (u *usagePlan) remove(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := u.api.DeleteApiKey(ctx, &apigateway.DeleteApiKeyInput{ApiKey: aws.String(id)}); err != nil {
		return fmt.Errorf("remove API Gateway key %s again (delete it by hand): %w", id, err)
	}
	return nil
}

// newUsageValue returns 40 random base64url characters read from r.
func newUsageValue(r io.Reader) (string, error) {
	b := make([]byte, usageValueBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("make a usage key value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
