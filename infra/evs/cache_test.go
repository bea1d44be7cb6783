package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
)

// cacheFunctions are the functions that use the account result cache:
// /v1/verify and the batch worker (docs/cache.md).
var cacheFunctions = []string{"VerifyFunction", "WorkerFunction"}

// TestCacheTTLParameter: EVS_CACHE_TTL is one stack parameter, passed to
// the functions that use the result cache and to no other; its default is
// the configuration's, and its AllowedPattern takes the usual durations and
// nothing the configuration refuses, so a deploy never starts functions
// that refuse their environment. Those functions may read and write cache items in the
// Results table.
func TestCacheTTLParameter(t *testing.T) {
	tpl := expand(t)
	var param string
	var got []string
	for id, r := range tpl.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		env, _ := r.Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		v, ok := vars["EVS_CACHE_TTL"]
		if !ok {
			continue
		}
		got = append(got, id)
		p, isRef := ref(v)
		if !isRef || tpl.Parameters[p] == nil || (param != "" && p != param) {
			t.Errorf("%s: EVS_CACHE_TTL = %v, want !Ref of one parameter", id, v)
		}
		param = p
		role, _, _ := getAtt(r.Properties["Role"])
		for _, action := range []string{"dynamodb:GetItem", "dynamodb:BatchWriteItem"} {
			if !allowsCache(tpl.Resources[role], action) {
				t.Errorf("%s: its role %s does not allow %s on the Results table's ~cache# items", id, role, action)
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, cacheFunctions) {
		t.Fatalf("EVS_CACHE_TTL is set for %v, want %v", got, cacheFunctions)
	}
	p := tpl.Parameters[param]
	def, _ := p["Default"].(string)
	cfg, err := config.FromEnv(func(k string) string {
		if k == "EVS_CACHE_TTL" {
			return def
		}
		return ""
	}, true)
	if err != nil && strings.Contains(err.Error(), "EVS_CACHE_TTL") || cfg.CacheTTL != cache.DefaultVerdictTTL {
		t.Errorf("parameter %s default %q gives %v (%v), want %v", param, def, cfg.CacheTTL, err, cache.DefaultVerdictTTL)
	}
	pattern, _ := p["AllowedPattern"].(string)
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("parameter %s AllowedPattern %q: %v", param, pattern, err)
	}
	for _, c := range []struct {
		v    string
		want bool // the pattern takes it
	}{
		{def, true}, {"0", true}, {"0s", true}, {"90m", true}, {"1h30m", true}, {"1.5h", true}, {"500ms", true},
		{"-1h", false}, {"1d", false}, {"24", false}, {"1 h", false}, {"h", false}, {"24H", false}, {"", false},
	} {
		_, err := config.FromEnv(func(k string) string {
			if k == "EVS_CACHE_TTL" {
				return c.v
			}
			return ""
		}, true)
		refused := err != nil && strings.Contains(err.Error(), "EVS_CACHE_TTL")
		if took := re.MatchString(c.v); took != c.want || (took && refused) {
			t.Errorf("%q: AllowedPattern takes it: %v, want %v; the configuration refuses it: %v", c.v, took, c.want, refused)
		}
	}
}

// policyActions is an IAM statement's Action: one name or a list of them.
func policyActions(action any) []string {
	switch a := action.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

// allowsCache reports whether an IAM role has an unconditional statement
// (not under Fn::If) allowing action on the Results table, whose leading
// keys, if restricted, include the cache's partitions.
func allowsCache(role cfnResource, action string) bool {
	pols, _ := role.Properties["Policies"].([]any)
	for _, pol := range pols {
		doc, _ := pol.(map[string]any)["PolicyDocument"].(map[string]any)
		sts, _ := doc["Statement"].([]any)
		for _, s := range sts {
			st, _ := s.(map[string]any)
			b, _ := json.Marshal(st)
			res, _ := json.Marshal(st["Resource"])
			if st["Effect"] != "Allow" || !slices.Contains(policyActions(st["Action"]), action) || !strings.Contains(string(res), `"ResultsTable"`) {
				continue
			}
			if st["Condition"] == nil || strings.Contains(string(b), `"~cache#*"`) {
				return true
			}
		}
	}
	return false
}
