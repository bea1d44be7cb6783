package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/verify"
)

// These tests read template.yaml the way CloudFormation will: expanded by
// the SAM translator (the Python module samtranslator, which cfn-lint
// installs) into plain CloudFormation, so they see the resources SAM
// generates (the API's RestApi and Stage, the worker's event source
// mapping, the functions' roles) and not only what the template spells.

// translateScript expands the template named by argv[1] and prints the
// result as JSON. Its managed-policy loader knows no names: the template
// uses SAM policy templates and inline statements only, so the translator
// never needs to look an AWS managed policy up.
const translateScript = `
import json, sys
try:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse
except ImportError as e:
    sys.stderr.write("samtranslator is not installed (it comes with cfn-lint: pip install cfn-lint): %s\n" % e)
    sys.exit(3)

class NoManagedPolicies:
    def load(self):
        return {}

with open(sys.argv[1]) as f:
    t = yaml_parse(f.read())
# sam package replaces the local CodeUri with the uploaded artefact, and the
# translator accepts only the latter.
t["Globals"]["Function"]["CodeUri"] = "s3://evs-artifacts/evs.zip"
json.dump(transform(t, {}, NoManagedPolicies()), sys.stdout)
`

type cfnTemplate struct {
	Parameters map[string]map[string]any `json:"Parameters"`
	Rules      map[string]cfnRule        `json:"Rules"`
	Conditions map[string]any            `json:"Conditions"`
	Resources  map[string]cfnResource    `json:"Resources"`
	Outputs    map[string]struct {
		Value any `json:"Value"`
	} `json:"Outputs"`
}

type cfnResource struct {
	Type                string         `json:"Type"`
	Condition           string         `json:"Condition"`
	DeletionPolicy      string         `json:"DeletionPolicy"`
	UpdateReplacePolicy string         `json:"UpdateReplacePolicy"`
	Properties          map[string]any `json:"Properties"`
}

type cfnRule struct {
	RuleCondition any `json:"RuleCondition"`
	Assertions    []struct {
		Assert            any    `json:"Assert"`
		AssertDescription string `json:"AssertDescription"`
	} `json:"Assertions"`
}

var (
	expandOnce sync.Once
	expanded   cfnTemplate
	expandErr  error
)

// expand returns template.yaml translated by samtranslator. It fails, never
// skips, when python3 or samtranslator is missing.
func expand(t *testing.T) cfnTemplate {
	t.Helper()
	expandOnce.Do(func() {
		if _, err := exec.LookPath("python3"); err != nil {
			expandErr = errors.New("python3 not found: the SAM translator checks need python3 with samtranslator (pip install cfn-lint)")
			return
		}
		cmd := exec.Command("python3", "-c", translateScript, "../../template.yaml")
		// The translator asks boto3 for a region; no AWS call is made.
		cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=us-east-1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			expandErr = errors.New("samtranslator: " + err.Error() + ": " + lines[len(lines)-1])
			return
		}
		expandErr = json.Unmarshal(out, &expanded)
	})
	if expandErr != nil {
		t.Fatal(expandErr)
	}
	return expanded
}

// ref returns the logical ID of {"Ref": id}.
func ref(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	s, ok := m["Ref"].(string)
	return s, ok
}

// getAtt returns the logical ID and attribute of {"Fn::GetAtt": [id, attr]}.
func getAtt(v any) (string, string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", "", false
	}
	l, ok := m["Fn::GetAtt"].([]any)
	if !ok || len(l) != 2 {
		return "", "", false
	}
	id, _ := l[0].(string)
	attr, _ := l[1].(string)
	return id, attr, id != "" && attr != ""
}

// dimensionTargets says, for each AWS namespace and dimension the alarms
// use, what the value must be: a Ref to a resource of the type (Attr
// empty), or a GetAtt of that attribute, or (Prop set) a value equal to
// that property of a resource of the type. A Ref to a queue, say, gives
// its URL, which matches no SQS metric.
var dimensionTargets = map[string]struct{ Type, Attr, Prop string }{
	"AWS/Lambda FunctionName": {Type: "AWS::Lambda::Function"},
	"AWS/DynamoDB TableName":  {Type: "AWS::DynamoDB::Table"},
	"AWS/SQS QueueName":       {Type: "AWS::SQS::Queue", Attr: "QueueName"},
	"AWS/ApiGateway ApiName":  {Type: "AWS::ApiGateway::RestApi", Prop: "Name"},
	"AWS/ApiGateway Stage":    {Type: "AWS::ApiGateway::Stage", Prop: "StageName"},
}

type alarmMetric struct {
	Namespace, Name string
	Dimensions      map[string]any
}

// alarmMetrics returns the metrics an alarm watches: its own, or those of
// its metric math.
func alarmMetrics(t *testing.T, id string, p map[string]any) []alarmMetric {
	t.Helper()
	dims := func(v any) map[string]any {
		out := map[string]any{}
		l, _ := v.([]any)
		for _, d := range l {
			m, _ := d.(map[string]any)
			name, _ := m["Name"].(string)
			out[name] = m["Value"]
		}
		return out
	}
	if ns, ok := p["Namespace"].(string); ok {
		name, _ := p["MetricName"].(string)
		return []alarmMetric{{ns, name, dims(p["Dimensions"])}}
	}
	var out []alarmMetric
	l, _ := p["Metrics"].([]any)
	for _, q := range l {
		m, _ := q.(map[string]any)
		stat, ok := m["MetricStat"].(map[string]any)
		if !ok {
			continue // an expression over the others
		}
		metric, _ := stat["Metric"].(map[string]any)
		ns, _ := metric["Namespace"].(string)
		name, _ := metric["MetricName"].(string)
		out = append(out, alarmMetric{ns, name, dims(metric["Dimensions"])})
	}
	if len(out) == 0 {
		t.Errorf("%s: watches no metric", id)
	}
	return out
}

// emfDimensions returns the dimensions (name → value) of the records the
// worker's EMF emitter writes for a failed webhook delivery, by metric name.
func emfDimensions(t *testing.T) (namespace string, dims map[string]map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	emf := &app.EMF{W: &buf}
	// One line of each metric an alarm watches, as the worker writes it.
	emf.WebhookDelivery("failed")
	emf.SMTPConnectionFailure(app.ExitFailure)
	emf.SMTPExit(0, "exit-a.example", false)
	emf.EgressCheck("exit-a.example", verify.EgressCheck{
		Blocklists: []verify.Listing{{Zone: "bl.example", Listed: true, Codes: []string{"127.0.0.2"}}},
		HELO:       &verify.HELOCheck{Name: "probe.example", Detail: "the HELO name does not resolve"},
	})
	dims = map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("EMF line %q: %v", line, err)
		}
		var aws struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		}
		b, _ := json.Marshal(rec["_aws"])
		if err := json.Unmarshal(b, &aws); err != nil {
			t.Fatal(err)
		}
		for _, d := range aws.CloudWatchMetrics {
			namespace = d.Namespace
			for _, m := range d.Metrics {
				// The last set: a metric also counted under no
				// dimension (SMTPExit) is alarmed on as such.
				set := map[string]any{}
				for _, k := range d.Dimensions[len(d.Dimensions)-1] {
					set[k] = rec[k]
				}
				dims[m.Name] = set
			}
		}
	}
	return namespace, dims
}

// checkDimension reports why value is not a dimension value that names a
// resource of the stack, or "".
func checkDimension(tpl cfnTemplate, key string, value any) string {
	want, ok := dimensionTargets[key]
	if !ok {
		return "no rule for this dimension"
	}
	if want.Prop != "" {
		for _, r := range tpl.Resources {
			if r.Type == want.Type && r.Condition == "" && reflect.DeepEqual(r.Properties[want.Prop], value) {
				return ""
			}
		}
		return "equals the " + want.Prop + " of no " + want.Type
	}
	id, attr, isAtt := getAtt(value)
	if !isAtt {
		id, ok = ref(value)
		if !ok {
			return "is neither a Ref nor a GetAtt"
		}
	}
	r, ok := tpl.Resources[id]
	switch {
	case !ok:
		return "names " + id + ", which is no resource of the stack"
	case r.Type != want.Type:
		return "names " + id + ", a " + r.Type + ", not a " + want.Type
	case attr != want.Attr:
		return "takes " + id + "'s " + orDefault(attr, "Ref") + ", want " + orDefault(want.Attr, "Ref")
	case r.Condition != "":
		return "names " + id + ", which exists only under condition " + r.Condition
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkAction reports why an alarm action is not an SNS topic the stack has
// in every case, or "".
func checkAction(tpl cfnTemplate, v any, underCondition string) string {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if l, ok := m["Fn::If"].([]any); ok && len(l) == 3 {
			cond, _ := l[0].(string)
			if _, ok := tpl.Conditions[cond]; !ok {
				return "Fn::If on unknown condition " + cond
			}
			if why := checkAction(tpl, l[1], cond); why != "" {
				return why
			}
			return checkAction(tpl, l[2], "")
		}
	}
	id, ok := ref(v)
	if !ok {
		return "neither a Ref nor an Fn::If of Refs"
	}
	if r, ok := tpl.Resources[id]; ok {
		if r.Type != "AWS::SNS::Topic" {
			return id + " is a " + r.Type + ", not an SNS topic"
		}
		if r.Condition != "" && r.Condition != underCondition {
			return id + " exists only under " + r.Condition + ", but is used under " + orDefault(underCondition, "no condition")
		}
		return ""
	}
	p, ok := tpl.Parameters[id]
	if !ok {
		return id + " is neither a resource nor a parameter"
	}
	if underCondition == "" {
		// The parameter is used when the condition is false: it must not be
		// the case in which it is empty.
		return ""
	}
	pat, _ := p["AllowedPattern"].(string)
	if !strings.Contains(pat, ":sns:") {
		return "parameter " + id + " is not constrained to an SNS topic ARN"
	}
	return ""
}

// Every alarm watches a resource the stack creates (or, for the service's
// own metrics, exactly the dimensions the worker emits) and notifies an SNS
// topic on ALARM and on OK. Every table, queue and function that can fail
// silently has an alarm.
func TestAlarmsWatchTheStack(t *testing.T) {
	tpl := expand(t)
	evsNamespace, evsDims := emfDimensions(t)
	watched := map[string][]string{} // resource → metric names
	var alarms []string
	for id, r := range tpl.Resources {
		if r.Type != "AWS::CloudWatch::Alarm" {
			continue
		}
		alarms = append(alarms, id)
		p := r.Properties
		for _, key := range []string{"AlarmActions", "OKActions"} {
			acts, _ := p[key].([]any)
			if len(acts) == 0 {
				t.Errorf("%s: no %s", id, key)
			}
			for _, a := range acts {
				if why := checkAction(tpl, a, ""); why != "" {
					t.Errorf("%s: %s %v: %s", id, key, a, why)
				}
			}
		}
		if p["TreatMissingData"] != "notBreaching" {
			t.Errorf("%s: TreatMissingData %v; every alarm here counts events, whose absence is good news", id, p["TreatMissingData"])
		}
		for _, m := range alarmMetrics(t, id, p) {
			if !strings.HasPrefix(m.Namespace, "AWS/") {
				want, ok := evsDims[m.Name]
				if m.Namespace != evsNamespace || !ok || !reflect.DeepEqual(m.Dimensions, want) {
					t.Errorf("%s: %s %s %v: the worker emits %s with dimensions %v", id, m.Namespace, m.Name, m.Dimensions, m.Name, want)
				}
				continue
			}
			if len(m.Dimensions) == 0 {
				t.Errorf("%s: %s %s has no dimensions: it would watch the whole account", id, m.Namespace, m.Name)
			}
			for name, v := range m.Dimensions {
				if why := checkDimension(tpl, m.Namespace+" "+name, v); why != "" {
					t.Errorf("%s: dimension %s %v %s", id, name, v, why)
					continue
				}
				if rid, ok := ref(v); ok {
					watched[rid] = append(watched[rid], m.Name)
				} else if rid, _, ok := getAtt(v); ok {
					watched[rid] = append(watched[rid], m.Name)
				}
			}
		}
	}
	sort.Strings(alarms)
	t.Logf("alarms: %v", alarms)
	need := map[string][]string{
		"WorkerFunction":  {"Errors", "Throttles"},
		"WorkQueue":       {"ApproximateAgeOfOldestMessage"},
		"DeadLetterQueue": {"ApproximateNumberOfMessagesVisible"},
	}
	for id, r := range tpl.Resources {
		switch {
		case r.Type == "AWS::DynamoDB::Table":
			need[id] = []string{"ReadThrottleEvents", "WriteThrottleEvents"}
		case r.Type == "AWS::Lambda::Function" && id != "WorkerFunction":
			need[id] = []string{"Throttles"}
		}
	}
	for id, metricNames := range need {
		for _, m := range metricNames {
			if !slices.Contains(watched[id], m) {
				t.Errorf("no alarm watches %s of %s", m, id)
			}
		}
	}
	// The API's 5XX: its name is the one the Api resource sets (checked
	// above by value), and some alarm watches it.
	found := false
	for _, id := range alarms {
		for _, m := range alarmMetrics(t, id, tpl.Resources[id].Properties) {
			found = found || m.Namespace == "AWS/ApiGateway" && m.Name == "5XXError"
		}
	}
	if !found {
		t.Error("no alarm watches the API's 5XXError")
	}
}

// The SQS trigger caps the worker's concurrency with a parameter, so a large
// list cannot take the account's whole Lambda pool; the worker has no
// reserved concurrency (a throttled SQS-triggered function burns receive
// counts towards the dead-letter queue), and the API functions can have
// capacity reserved for them.
func TestWorkerConcurrencyCapped(t *testing.T) {
	tpl := expand(t)
	var esm []string
	for id, r := range tpl.Resources {
		if r.Type != "AWS::Lambda::EventSourceMapping" {
			continue
		}
		if fn, _ := ref(r.Properties["FunctionName"]); fn != "WorkerFunction" {
			t.Errorf("%s triggers %v, not the worker", id, r.Properties["FunctionName"])
			continue
		}
		if r.Condition == "" {
			// The SES notification queue's mapping exists only with
			// SesNotificationTopicArn; it is capped the same way.
			esm = append(esm, id)
		}
		sc, _ := r.Properties["ScalingConfig"].(map[string]any)
		param, ok := ref(sc["MaximumConcurrency"])
		p := tpl.Parameters[param]
		if !ok || p == nil {
			t.Fatalf("%s: ScalingConfig %v; want MaximumConcurrency from a parameter", id, r.Properties["ScalingConfig"])
		}
		// SQS event sources accept 2 to 1000.
		if p["Type"] != "Number" || num(p["MinValue"]) < 2 || num(p["MaxValue"]) > 1000 || num(p["Default"]) < 2 || num(p["Default"]) > 1000 {
			t.Errorf("parameter %s = %v; want a Number within 2..1000", param, p)
		}
	}
	if len(esm) != 1 {
		t.Fatalf("event source mappings of the worker: %v, want one", esm)
	}
	for id, r := range tpl.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		rc, set := r.Properties["ReservedConcurrentExecutions"]
		if id == "WorkerFunction" {
			if set {
				t.Errorf("WorkerFunction has reserved concurrency %v; its cap belongs on the trigger", rc)
			}
			continue
		}
		l, _ := rc.(map[string]any)["Fn::If"].([]any)
		if len(l) != 3 {
			t.Errorf("%s: ReservedConcurrentExecutions %v; want Fn::If [condition, !Ref parameter, !Ref AWS::NoValue]", id, rc)
			continue
		}
		p, _ := ref(l[1])
		nv, _ := ref(l[2])
		if tpl.Parameters[p] == nil || nv != "AWS::NoValue" {
			t.Errorf("%s: ReservedConcurrentExecutions %v; want Fn::If [condition, !Ref parameter, !Ref AWS::NoValue]", id, rc)
		}
	}
}

func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case string:
		var f float64
		_ = json.Unmarshal([]byte(n), &f)
		return f
	}
	return -1
}

// secretLike matches parameter names and descriptions that suggest a
// secret, or a URL that can carry credentials (user:pass@host).
var secretLike = regexp.MustCompile(`(?i)secret|passw|credential|token|api.?key|proxy.?url|\w+://\S*@|user:pass`)

// plainSecret reports whether a parameter looks like a secret yet would
// show its value in the console and in CloudFormation events: a free-form
// String (numbers and lists of allowed values cannot hold one) that is
// neither NoEcho nor constrained to an ARN (which names a secret, not its
// value).
func plainSecret(name string, p map[string]any) bool {
	desc, _ := p["Description"].(string)
	if !secretLike.MatchString(name) && !secretLike.MatchString(desc) {
		return false
	}
	if _, enum := p["AllowedValues"]; p["Type"] != "String" || enum {
		return false
	}
	if p["NoEcho"] == true || p["NoEcho"] == "true" {
		return false
	}
	pat, _ := p["AllowedPattern"].(string)
	return !(strings.HasSuffix(name, "Arn") && (strings.HasPrefix(pat, "^arn:") || strings.HasPrefix(pat, "^(arn:")))
}

// No parameter that looks like a secret is a plain String: the SMTP proxy
// (whose URL may carry credentials) is given as the ARN of a Secrets Manager
// secret, readable by exactly the functions that dial SMTP, and no function
// gets the proxy URL in its environment.
func TestNoPlainSecretParameters(t *testing.T) {
	tpl := expand(t)
	// The check catches the parameter this stack used to have.
	if !plainSecret("SmtpProxyUrl", map[string]any{"Type": "String", "Description": "socks5://host:port of a SOCKS5 exit"}) {
		t.Fatal("plainSecret misses a plain proxy URL parameter")
	}
	for name, p := range tpl.Parameters {
		if plainSecret(name, p) {
			t.Errorf("parameter %s looks like a secret but is plain (no NoEcho, not an ARN): %v", name, p)
		}
	}
	const arnParam = "SmtpProxySecretArn"
	if tpl.Parameters[arnParam] == nil {
		t.Fatalf("no parameter %s", arnParam)
	}
	readers := map[string]bool{}
	for id, r := range tpl.Resources {
		if r.Type == "AWS::Lambda::Function" {
			env, _ := r.Properties["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			if _, ok := vars["EVS_SMTP_PROXY"]; ok {
				t.Errorf("%s: EVS_SMTP_PROXY in the environment; the proxy comes from its secret", id)
			}
			if p, _ := ref(vars["EVS_SMTP_PROXY_SECRET"]); p != arnParam {
				t.Errorf("%s: EVS_SMTP_PROXY_SECRET = %v, want !Ref %s", id, vars["EVS_SMTP_PROXY_SECRET"], arnParam)
			}
		}
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		pols, _ := r.Properties["Policies"].([]any)
		for _, pol := range pols {
			b, _ := json.Marshal(pol)
			if !strings.Contains(string(b), "secretsmanager:") {
				continue
			}
			// Only under the condition that the ARN is set, and only
			// GetSecretValue on that ARN.
			l, _ := pol.(map[string]any)["Fn::If"].([]any)
			if len(l) != 3 {
				t.Errorf("%s: Secrets Manager policy %s not conditioned on the parameter", id, b)
				continue
			}
			cond, _ := l[0].(string)
			cb, _ := json.Marshal(tpl.Conditions[cond])
			if string(cb) != `{"Fn::Not":[{"Fn::Equals":[{"Ref":"`+arnParam+`"},""]}]}` {
				t.Errorf("%s: condition %s = %s, want %s not empty", id, cond, cb, arnParam)
			}
			var doc struct {
				PolicyDocument struct {
					Statement []struct {
						Effect   string
						Action   []string
						Resource any
					}
				}
			}
			b, _ = json.Marshal(l[1])
			_ = json.Unmarshal(b, &doc)
			st := doc.PolicyDocument.Statement
			if len(st) != 1 || st[0].Effect != "Allow" || !reflect.DeepEqual(st[0].Action, []string{"secretsmanager:GetSecretValue"}) {
				t.Errorf("%s: Secrets Manager statement %s; want Allow GetSecretValue only", id, b)
				continue
			}
			if p, _ := ref(st[0].Resource); p != arnParam {
				t.Errorf("%s: GetSecretValue on %v, want exactly !Ref %s", id, st[0].Resource, arnParam)
			}
			readers[id] = true
		}
	}
	// The functions that build the SMTP engine read the secret; the others
	// do not get to.
	want := map[string]bool{"VerifyFunctionRole": true, "WorkerFunctionRole": true}
	if !reflect.DeepEqual(readers, want) {
		t.Errorf("roles that may read the proxy secret: %v, want %v", sortedKeys(readers), sortedKeys(want))
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// lambdaAuthorizerCache is how long the authorizer function itself may
// answer from memory after a key is revoked: nothing, it reads the key with
// a strongly consistent read on every call
// (functions/verify/functions_test.go, TestLambdaBinaries/authorizer,
// revokes a key between two calls of a warm function and gets Deny).
const lambdaAuthorizerCache = 0

// A revoked key stops working on AWS within 60 s: API Gateway caches the
// authorizer's Allow per X-Api-Key for authorizerResultTtlInSeconds, and
// the authorizer function adds nothing. The template does not set the
// local gateway's EVS_AUTH_TTL for the Lambda, where it would mean nothing.
func TestRevocationWithin60s(t *testing.T) {
	tpl := expand(t)
	var found int
	for id, r := range tpl.Resources {
		if r.Type != "AWS::ApiGateway::RestApi" {
			continue
		}
		body, _ := r.Properties["Body"].(map[string]any)
		defs, _ := body["securityDefinitions"].(map[string]any)
		for name, d := range defs {
			az, ok := d.(map[string]any)["x-amazon-apigateway-authorizer"].(map[string]any)
			if !ok {
				continue
			}
			found++
			ttl := num(az["authorizerResultTtlInSeconds"])
			if ttl < 0 || ttl+lambdaAuthorizerCache > 60 {
				t.Errorf("%s %s: authorizer results cached %v s (+%d s in the function); a revoked key must stop within 60 s", id, name, az["authorizerResultTtlInSeconds"], lambdaAuthorizerCache)
			}
			// A result is cached per key, never shared between keys.
			if az["identitySource"] != "method.request.header.X-Api-Key" {
				t.Errorf("%s %s: identitySource %v, want the X-Api-Key header alone", id, name, az["identitySource"])
			}
		}
	}
	if found != 1 {
		t.Fatalf("%d Lambda authorizers in the expanded template, want 1", found)
	}
	for id, r := range tpl.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		env, _ := r.Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		if v, ok := vars["EVS_AUTH_TTL"]; ok {
			t.Errorf("%s sets EVS_AUTH_TTL=%v, the local gateway's cache, which no Lambda reads", id, v)
		}
	}
}

// TestVPCModeIsOptional: the functions that open SMTP sessions (verify,
// worker) can run in private subnets, for a fixed egress address through a
// NAT gateway, and run outside any VPC when SmtpSubnetIds is empty; the
// others never join a VPC (they open no SMTP session, and a VPC only adds
// to their cold starts).
func TestVPCModeIsOptional(t *testing.T) {
	tpl := expand(t)
	for _, p := range []string{"SmtpSubnetIds", "SmtpSecurityGroupIds"} {
		if tpl.Parameters[p] == nil || tpl.Parameters[p]["Type"] != "CommaDelimitedList" || tpl.Parameters[p]["Default"] != "" {
			t.Errorf("parameter %s = %v; want a CommaDelimitedList defaulting to empty", p, tpl.Parameters[p])
		}
	}
	if tpl.Conditions["SmtpInVpc"] == nil {
		t.Fatal("no SmtpInVpc condition")
	}
	for id, r := range tpl.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		vc, set := r.Properties["VpcConfig"]
		if id != "VerifyFunction" && id != "WorkerFunction" {
			if set {
				t.Errorf("%s has VpcConfig %v", id, vc)
			}
			continue
		}
		l, _ := vc.(map[string]any)["Fn::If"].([]any)
		if len(l) != 3 || l[0] != "SmtpInVpc" {
			t.Errorf("%s: VpcConfig %v; want Fn::If [SmtpInVpc, {...}, !Ref AWS::NoValue]", id, vc)
			continue
		}
		in, _ := l[1].(map[string]any)
		subnets, _ := ref(in["SubnetIds"])
		groups, _ := ref(in["SecurityGroupIds"])
		nv, _ := ref(l[2])
		if subnets != "SmtpSubnetIds" || groups != "SmtpSecurityGroupIds" || nv != "AWS::NoValue" {
			t.Errorf("%s: VpcConfig %v", id, vc)
		}
		// In a VPC the function must be allowed to make its network
		// interfaces (SAM adds the managed policy for a VpcConfig).
		role := tpl.Resources[id+"Role"]
		arns, _ := json.Marshal(role.Properties["ManagedPolicyArns"])
		if !strings.Contains(string(arns), "AWSLambdaVPCAccessExecutionRole") {
			t.Errorf("%sRole has no VPC access policy: %s", id, arns)
		}
	}
}

// TestStageThrottleAboveOneKey: the stage's throttle is shared by every
// account, so it comes from parameters of its own whose defaults sit well
// above one key's usage-plan limit: one account at its limit must not
// throttle the others.
func TestStageThrottleAboveOneKey(t *testing.T) {
	tpl := expand(t)
	var stages int
	for id, r := range tpl.Resources {
		if r.Type != "AWS::ApiGateway::Stage" {
			continue
		}
		stages++
		ms, _ := r.Properties["MethodSettings"].([]any)
		if len(ms) == 0 {
			t.Fatalf("%s has no MethodSettings: no stage throttle", id)
		}
		for _, m := range ms {
			m, _ := m.(map[string]any)
			if m["ResourcePath"] != "/*" || m["HttpMethod"] != "*" {
				continue // TestConsoleThrottledApart
			}
			rate, okR := ref(m["ThrottlingRateLimit"])
			burst, okB := ref(m["ThrottlingBurstLimit"])
			if !okR || !okB || rate == "ThrottleRateLimit" || burst == "ThrottleBurstLimit" {
				t.Fatalf("%s throttles the stage with %v/%v; want parameters of its own, not one key's", id, m["ThrottlingRateLimit"], m["ThrottlingBurstLimit"])
			}
			if r, k := num(tpl.Parameters[rate]["Default"]), num(tpl.Parameters["ThrottleRateLimit"]["Default"]); r < 10*k {
				t.Errorf("stage rate %v by default, one key's %v: want at least ten keys' worth", r, k)
			}
			if b, k := num(tpl.Parameters[burst]["Default"]), num(tpl.Parameters["ThrottleBurstLimit"]["Default"]); b < 10*k {
				t.Errorf("stage burst %v by default, one key's %v: want at least ten keys' worth", b, k)
			}
		}
	}
	if stages != 1 {
		t.Fatalf("%d stages, want 1", stages)
	}
}

// No role may Scan a table but the worker's the Batches table, for the
// one-off backfill of its index keys (the sweep reads the active index):
// only `evs keys`, with an operator's credentials, lists keys, and the
// functions read by key or Query. Nor may one change the input bucket's
// ACLs, lifecycle or other settings:
// the functions read and write objects.
func TestLeastPrivilege(t *testing.T) {
	tpl := expand(t)
	for id, r := range tpl.Resources {
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		pols, _ := r.Properties["Policies"].([]any)
		b, _ := json.Marshal(pols)
		var docs []struct {
			PolicyDocument struct {
				Statement []struct {
					Effect   string
					Action   any
					Resource any
				}
			}
		}
		_ = json.Unmarshal(b, &docs)
		for _, d := range docs {
			for _, st := range d.PolicyDocument.Statement {
				res, _ := json.Marshal(st.Resource)
				for _, a := range policyActions(st.Action) {
					bucketSetting := strings.HasPrefix(a, "s3:") && !slices.Contains([]string{
						"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:AbortMultipartUpload",
					}, a)
					backfill := id == "WorkerFunctionRole" && strings.Contains(string(res), `"BatchesTable"`) &&
						!strings.Contains(string(res), `"KeysTable"`) && !strings.Contains(string(res), `"ResultsTable"`) && !strings.Contains(string(res), `"IdempotencyTable"`)
					if st.Effect == "Allow" && (bucketSetting || a == "dynamodb:Scan" && !backfill) {
						t.Errorf("%s may %s on %s", id, a, res)
					}
				}
			}
		}
	}
}

// The worker's trigger gathers messages for a few seconds (packing a
// plan's burst into one invocation) only with partial batch failures, so
// one failed record never brings its batch-mates back; and the queue hides
// a message for six times the worker's timeout plus that window, as AWS
// advises, so none is redelivered while it runs.
func TestWorkerBatchingWindow(t *testing.T) {
	tpl := expand(t)
	for id, r := range tpl.Resources {
		queue, _, _ := getAtt(r.Properties["EventSourceArn"])
		if r.Type != "AWS::Lambda::EventSourceMapping" || queue != "WorkQueue" {
			continue
		}
		window := num(r.Properties["MaximumBatchingWindowInSeconds"])
		if window < 1 || window > 10 {
			t.Errorf("%s: MaximumBatchingWindowInSeconds %v, want 1 to 10 s", id, window)
		}
		if types, _ := r.Properties["FunctionResponseTypes"].([]any); !slices.Contains(types, any("ReportBatchItemFailures")) {
			t.Errorf("%s: FunctionResponseTypes %v, want ReportBatchItemFailures", id, types)
		}
		timeout := num(tpl.Resources["WorkerFunction"].Properties["Timeout"])
		if vis := num(tpl.Resources[queue].Properties["VisibilityTimeout"]); vis < 6*timeout+window {
			t.Errorf("WorkQueue's VisibilityTimeout %v, want at least 6 × %v + %v", vis, timeout, window)
		}
		return
	}
	t.Fatal("no event source mapping from WorkQueue")
}
