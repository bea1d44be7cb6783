package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

func load(t *testing.T) *testkit.SAMTemplate {
	t.Helper()
	tpl, err := testkit.LoadSAMTemplate("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// The local gateway routes exactly what API Gateway routes, to the same
// functions. Template routes use ANY so that a wrong method reaches the
// function and gets the contract's 405 rather than API Gateway's 403.
func TestRoutesMatchTemplate(t *testing.T) {
	tpl := load(t)
	var got, want []string
	preflight := false
	for _, r := range tpl.Routes {
		if isConsole(r) {
			continue // TestConsoleRoutesOpen
		}
		if r.Method == http.MethodOptions {
			// The one route without a key: the CORS preflight of
			// publishable keys, on the verify function (api.Preflight).
			want := testkit.SAMRoute{Function: api.VerifyFunction, Path: "/v1/verify", Method: http.MethodOptions, Authorizer: "NONE", APIKeyRequired: "false"}
			if r != want {
				t.Errorf("template route %+v, want only the preflight %+v", r, want)
			}
			preflight = true
			continue
		}
		if r.Authorizer != "" || r.APIKeyRequired != "" {
			t.Errorf("template route %s %s: Auth %q/%q of its own; an API route keeps the API's authorizer and key", r.Function, r.Path, r.Authorizer, r.APIKeyRequired)
		}
		if r.Method != "ANY" {
			t.Errorf("template route %s %s: method %q, want ANY (the function answers 405 itself)", r.Function, r.Path, r.Method)
		}
		got = append(got, r.Function+" "+r.Path)
	}
	for _, r := range api.Routes() {
		want = append(want, r.Function+" "+r.Path)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("routes differ\ntemplate: %q\napi.Routes: %q", got, want)
	}
	if !preflight {
		t.Error("template has no OPTIONS /v1/verify (the publishable keys' CORS preflight)")
	}
}

// isConsole tells the routes served with no key by the requests function:
// the console's, and the sign-up widget's.
func isConsole(r testkit.SAMRoute) bool {
	return r.Path == api.HomeResource || r.Path == api.WidgetPath || r.Path == api.ConsoleRootResource || strings.HasPrefix(r.Path, api.ConsoleRootResource+"/")
}

// The console's routes are on the requests function (whose handler serves
// api.ConsoleRootResource and api.ConsoleFilesResource, and the stage's
// root, which sends a browser there), GET only, with no authorizer and no
// usage-plan key, and the stack says where the console is.
func TestConsoleRoutesOpen(t *testing.T) {
	tpl := load(t)
	var got []testkit.SAMRoute
	for _, r := range tpl.Routes {
		if isConsole(r) {
			got = append(got, r)
		}
	}
	var want []testkit.SAMRoute
	for _, p := range []string{api.ConsoleRootResource, api.ConsoleFilesResource, api.HomeResource, api.WidgetPath} {
		want = append(want, testkit.SAMRoute{Function: api.RequestsFunction, Path: p, Method: "GET", Authorizer: "NONE", APIKeyRequired: "false"})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("console routes\ntemplate: %+v\nwant:     %+v", got, want)
	}
	root := loadYAML(t)
	base := node(root, "Outputs", "ApiUrl", "Value")
	out := node(root, "Outputs", "ConsoleUrl", "Value")
	if base == nil || out == nil || out.Tag != "!Sub" || !strings.HasSuffix(base.Value, "/${Stage}") || out.Value != base.Value+api.ConsolePath {
		t.Errorf("Outputs.ConsoleUrl = %v, want the ApiUrl followed by %s", out, api.ConsolePath)
	}
	if out := node(root, "Outputs", "WidgetUrl", "Value"); out == nil || out.Tag != "!Sub" || base == nil || out.Value != base.Value+api.WidgetPath {
		t.Errorf("Outputs.WidgetUrl = %v, want the ApiUrl followed by %s", out, api.WidgetPath)
	}
}

// Every gateway reply of the local stand-in is declared in the template
// with the same status, envelope and headers, and the other way round.
func TestGatewayResponsesMatchTemplate(t *testing.T) {
	tpl := load(t)
	local := server.GatewayResponses()
	for typ := range tpl.GatewayResponses {
		if _, ok := local[typ]; !ok {
			t.Errorf("template declares gateway response %s that the local gateway does not know", typ)
		}
	}
	for typ, r := range local {
		t.Run(typ, func(t *testing.T) {
			g, ok := tpl.GatewayResponses[typ]
			if !ok {
				t.Fatalf("not declared in template.yaml")
			}
			switch {
			case g.Status == 0 && typ == "DEFAULT_4XX":
				// API Gateway keeps the original 4xx; locally the only
				// such replies are 400s.
				if r.Status != http.StatusBadRequest {
					t.Errorf("local status %d, want 400", r.Status)
				}
			case g.Status != r.Status:
				t.Errorf("status: template %d, local %d", g.Status, r.Status)
			}
			const rid = "0d6f6a8e-5e0b-4c53-9d1e-000000000000"
			var tb, lb any
			if err := json.Unmarshal([]byte(strings.ReplaceAll(g.Body, "$context.requestId", rid)), &tb); err != nil {
				t.Fatalf("template body is not JSON: %v\n%s", err, g.Body)
			}
			if err := json.Unmarshal(api.ErrorBody(r.Code, r.Message, rid), &lb); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tb, lb) {
				t.Errorf("body differs\ntemplate: %v\nlocal:    %v", tb, lb)
			}
			if g.Headers["X-Request-Id"] != "context.requestId" {
				t.Errorf("X-Request-Id mapping = %q, want context.requestId", g.Headers["X-Request-Id"])
			}
			want := map[string]string{"X-Request-Id": "context.requestId"}
			for k, v := range r.Headers {
				want[k] = "'" + v + "'"
			}
			if !reflect.DeepEqual(g.Headers, want) {
				t.Errorf("headers: template %v, local %v", g.Headers, want)
			}
		})
	}
}

// The tables the template creates have the key schemas the DynamoDB store
// writes (dynamostore.Definitions is what tests create on moto).
func TestTablesMatchStore(t *testing.T) {
	tpl := load(t)
	names := dynamostore.Tables{Keys: "KeysTable", Batches: "BatchesTable", Results: "ResultsTable", Idempotency: "IdempotencyTable"}
	defs := dynamostore.Definitions(names)
	if len(defs) != len(tpl.Tables) {
		t.Errorf("store defines %d tables, template %d", len(defs), len(tpl.Tables))
	}
	for _, d := range defs {
		id := *d.TableName
		tt, ok := tpl.Tables[id]
		if !ok {
			t.Errorf("store table %s is not in template.yaml", id)
			continue
		}
		attrType := map[string]string{}
		for _, a := range d.AttributeDefinitions {
			attrType[*a.AttributeName] = string(a.AttributeType)
		}
		keySchema := func(ks []types.KeySchemaElement) []testkit.SAMKeyAttr {
			var key []testkit.SAMKeyAttr
			for _, k := range ks {
				key = append(key, testkit.SAMKeyAttr{Name: *k.AttributeName, Type: attrType[*k.AttributeName], KeyType: string(k.KeyType)})
			}
			sort.SliceStable(key, func(i, j int) bool { return key[i].KeyType == "HASH" && key[j].KeyType != "HASH" })
			return key
		}
		if key := keySchema(d.KeySchema); !reflect.DeepEqual(key, tt.Key) {
			t.Errorf("%s key: store %v, template %v", id, key, tt.Key)
		}
		var indexes map[string]testkit.SAMIndex
		for _, g := range d.GlobalSecondaryIndexes {
			if indexes == nil {
				indexes = map[string]testkit.SAMIndex{}
			}
			indexes[*g.IndexName] = testkit.SAMIndex{Key: keySchema(g.KeySchema), Projection: string(g.Projection.ProjectionType)}
		}
		if !reflect.DeepEqual(indexes, tt.Indexes) {
			t.Errorf("%s indexes: store %+v, template %+v", id, indexes, tt.Indexes)
		}
		if d.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("%s: store billing mode %q, template PAY_PER_REQUEST", id, d.BillingMode)
		}
	}
}

// The functions find their tables through the environment the template
// sets: the variable names must be the ones the configuration reads, and
// every variable the template sets must be one the configuration accepts.
func TestEnvironmentNamesTables(t *testing.T) {
	tpl := load(t)
	read := map[string]bool{}
	// The template's values are references and parameters, not the values
	// Lambda will see, so only the names are checked against what the
	// configuration reads; the tables and the queue also by value.
	cfg, _ := config.FromEnv(func(k string) string {
		read[k] = true
		if strings.HasSuffix(k, "_TABLE") || k == "EVS_QUEUE_URL" || k == "EVS_INPUT_BUCKET" {
			return tpl.Env[k]
		}
		return ""
	}, true)
	for k := range tpl.Env {
		// AWS_ENDPOINT_URL is the AWS SDK's, declared for sam local.
		if !read[k] && k != "AWS_ENDPOINT_URL" {
			t.Errorf("template.yaml sets %s, which the configuration never reads", k)
		}
	}
	got := dynamostore.Tables(cfg.Tables)
	want := dynamostore.Tables{Keys: "KeysTable", Batches: "BatchesTable", Results: "ResultsTable", Idempotency: "IdempotencyTable", Inputs: "InputBucket"}
	if got != want {
		t.Errorf("tables with the template's environment = %+v, want %+v", got, want)
	}
	if cfg.QueueURL != "WorkQueue" {
		t.Errorf("EVS_QUEUE_URL = %q, want a reference to WorkQueue", cfg.QueueURL)
	}
}

// Every function in the template is built the way `sam build` builds it
// (BuildMethod makefile → the Makefile's build-<LogicalId> target) from a
// main package under functions/, for the runtime and architecture the
// template declares, and that build succeeds.
func TestFunctionsBuild(t *testing.T) {
	t.Parallel()
	tpl := load(t)
	if len(tpl.Functions) == 0 {
		t.Fatal("no functions in template.yaml")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, fn := range tpl.Functions {
		if fn.BuildMethod != "makefile" || fn.CodeURI != "." || fn.Handler != "bootstrap" || fn.Runtime != "provided.al2023" || !reflect.DeepEqual(fn.Architectures, []string{"arm64"}) {
			t.Errorf("%s: %+v; want BuildMethod makefile, CodeUri ., Handler bootstrap, provided.al2023, arm64", fn.ID, fn)
		}
		name := strings.ToLower(strings.TrimSuffix(fn.ID, "Function"))
		pkg := "./functions/" + name
		pkgs = append(pkgs, pkg)
		// make -n prints the recipe sam build would run, without running it.
		out, err := exec.Command("make", "-s", "-n", "-C", root, "build-"+fn.ID, "ARTIFACTS_DIR=/artifacts").CombinedOutput()
		if err != nil {
			t.Errorf("%s: no Makefile target build-%s: %v\n%s", fn.ID, fn.ID, err, out)
			continue
		}
		recipe := string(out)
		for _, want := range []string{"GOOS=linux", "GOARCH=arm64", "-tags lambda.norpc", "-trimpath", "-o /artifacts/bootstrap", pkg} {
			if !strings.Contains(recipe, want) {
				t.Errorf("%s: build recipe %q lacks %q", fn.ID, strings.TrimSpace(recipe), want)
			}
		}
	}
	if t.Failed() {
		return
	}
	// One go build for all of them: the dependencies compile once.
	cmd := exec.Command("go", append([]string{"build", "-tags", "lambda.norpc", "-trimpath", "-o", t.TempDir() + "/"}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %v for linux/arm64: %v\n%s", pkgs, err, out)
	}
}

// loadYAML is template.yaml's root node, for what testkit.SAMTemplate
// does not extract.
func loadYAML(t *testing.T) *yaml.Node {
	t.Helper()
	b, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// node returns the value under the keys path of a YAML mapping, or nil.
func node(n *yaml.Node, path ...string) *yaml.Node {
	for _, k := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

// Each schedule puts the message the worker handles as its kind (the
// sweep, the egress self-check) on the work queue the worker reads, and
// the queue lets EventBridge send it for those rules only.
func TestSchedulesTargetWorkQueue(t *testing.T) {
	res := node(loadYAML(t), "Resources")
	var rules []string
	for i := 0; i+1 < len(res.Content); i += 2 {
		if node(res.Content[i+1], "Type").Value == "AWS::Events::Rule" {
			rules = append(rules, res.Content[i].Value)
		}
	}
	schedules := []struct {
		rule, rate, kind, condition string
	}{
		{"SweepSchedule", "rate(5 minutes)", batch.KindSweep, ""},
		// Only when SMTP goes through the exits: nothing else is refused.
		{"SelfCheckSchedule", "rate(1 hour)", batch.KindSelfCheck, "SmtpProbing"},
	}
	var want []string
	for _, s := range schedules {
		want = append(want, s.rule)
	}
	slices.Sort(rules)
	slices.Sort(want)
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("event rules %v, want %v", rules, want)
	}
	for _, s := range schedules {
		if c := node(res, s.rule, "Condition"); (c == nil) != (s.condition == "") || c != nil && c.Value != s.condition {
			t.Errorf("%s: condition %v, want %q", s.rule, c, s.condition)
		}
		rule := node(res, s.rule, "Properties")
		if e := node(rule, "ScheduleExpression"); e == nil || e.Value != s.rate {
			t.Errorf("%s: schedule %v, want %s", s.rule, e, s.rate)
		}
		targets := node(rule, "Targets")
		if targets == nil || len(targets.Content) != 1 {
			t.Fatalf("%s: targets %v, want one", s.rule, targets)
		}
		tg := targets.Content[0]
		if arn := node(tg, "Arn"); arn == nil || arn.Tag != "!GetAtt" || arn.Value != "WorkQueue.Arn" {
			t.Errorf("%s: target %v, want !GetAtt WorkQueue.Arn", s.rule, arn)
		}
		var m batch.Message
		if in := node(tg, "Input"); in == nil || json.Unmarshal([]byte(in.Value), &m) != nil || m.Kind != s.kind {
			t.Errorf("%s: target input %v is not a %s message", s.rule, in, s.kind)
		}
	}
	// The worker reads the queue the rules send to.
	if q := node(res, "WorkerFunction", "Properties", "Events", "Work", "Properties", "Queue"); q == nil || q.Value != "WorkQueue.Arn" {
		t.Errorf("the worker reads %v, not the work queue", q)
	}
	pol := node(res, "WorkQueuePolicy", "Properties")
	if qs := node(pol, "Queues"); qs == nil || len(qs.Content) != 1 || qs.Content[0].Tag != "!Ref" || qs.Content[0].Value != "WorkQueue" {
		t.Fatalf("queue policy applies to %v, want [!Ref WorkQueue]", qs)
	}
	stmts := node(pol, "PolicyDocument", "Statement")
	if stmts == nil || len(stmts.Content) != 1 {
		t.Fatalf("statements %v, want one", stmts)
	}
	st := stmts.Content[0]
	checks := []struct {
		path       []string
		tag, value string
	}{
		{[]string{"Effect"}, "!!str", "Allow"},
		{[]string{"Principal", "Service"}, "!!str", "events.amazonaws.com"},
		{[]string{"Action"}, "!!str", "sqs:SendMessage"},
		{[]string{"Resource"}, "!GetAtt", "WorkQueue.Arn"},
	}
	for _, c := range checks {
		if n := node(st, c.path...); n == nil || n.Tag != c.tag || n.Value != c.value {
			t.Errorf("policy %v = %v, want %s %s", c.path, n, c.tag, c.value)
		}
	}
	// The sources: each rule's ARN, the conditional one under its
	// condition.
	src := node(st, "Condition", "ArnEquals", "aws:SourceArn")
	if src == nil || len(src.Content) != len(schedules) {
		t.Fatalf("policy source ARNs %v, want one per schedule", src)
	}
	for i, s := range schedules {
		n := src.Content[i]
		if s.condition != "" {
			if n.Tag != "!If" || len(n.Content) != 3 || n.Content[0].Value != s.condition {
				t.Errorf("source %d: %v, want !If [%s, …]", i, n, s.condition)
				continue
			}
			n = n.Content[1]
		}
		if n.Tag != "!GetAtt" || n.Value != s.rule+".Arn" {
			t.Errorf("source %d: %s %s, want !GetAtt %s.Arn", i, n.Tag, n.Value, s.rule)
		}
	}
}

// The input bucket lets a browser on any origin GET exported results from
// a pre-signed URL (the console's downloads) as a simple CORS request: the
// rule for GET allows no request header, so the API key could not be sent
// to S3 even by mistake, and PUT stays the only method with one.
func TestInputBucketCORS(t *testing.T) {
	rules := node(loadYAML(t), "Resources", "InputBucket", "Properties", "CorsConfiguration", "CorsRules")
	if rules == nil || rules.Kind != yaml.SequenceNode {
		t.Fatal("InputBucket has no CorsRules")
	}
	type rule struct {
		AllowedMethods []string `yaml:"AllowedMethods"`
		AllowedOrigins []string `yaml:"AllowedOrigins"`
		AllowedHeaders []string `yaml:"AllowedHeaders"`
	}
	got := map[string]rule{}
	for _, n := range rules.Content {
		var r rule
		if err := n.Decode(&r); err != nil {
			t.Fatal(err)
		}
		for _, m := range r.AllowedMethods {
			if _, dup := got[m]; dup {
				t.Errorf("method %s in two CORS rules", m)
			}
			got[m] = r
		}
	}
	want := map[string]rule{
		"PUT": {AllowedMethods: []string{"PUT"}, AllowedOrigins: []string{"*"}, AllowedHeaders: []string{"Content-Type"}},
		"GET": {AllowedMethods: []string{"GET"}, AllowedOrigins: []string{"*"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CORS rules by method %+v, want %+v", got, want)
	}
}

// ruleParams are the values CloudFormation gives the template's parameters
// on a deploy with overrides: each parameter's default, else the override.
// An override the parameter's own constraints refuse fails the test, so a
// case that is meant to reach the Rules does.
func ruleParams(t *testing.T, tpl cfnTemplate, overrides map[string]string) map[string]string {
	t.Helper()
	params := map[string]string{}
	for name, p := range tpl.Parameters {
		if d, ok := p["Default"]; ok {
			params[name] = paramString(d)
		}
	}
	for name, v := range overrides {
		p, ok := tpl.Parameters[name]
		if !ok {
			t.Fatalf("override %s=%s: no such parameter", name, v)
		}
		if av, ok := p["AllowedValues"].([]any); ok && !slices.ContainsFunc(av, func(a any) bool { return paramString(a) == v }) {
			t.Fatalf("override %s=%s: not among the parameter's AllowedValues %v", name, v, av)
		}
		if ap, ok := p["AllowedPattern"].(string); ok && !regexp.MustCompile(ap).MatchString(v) {
			t.Fatalf("override %s=%s: does not match the parameter's AllowedPattern", name, v)
		}
		params[name] = v
	}
	return params
}

// paramString is a parameter value of the expanded template as
// CloudFormation passes it on: 1000000, not 1e+06.
func paramString(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// ruleEval evaluates the rule-specific intrinsic functions the template's
// Rules may use (Ref to a parameter, Fn::Equals, Fn::Not, Fn::And, Fn::Or,
// Fn::Contains) with params, and with conds (a template's Conditions, nil
// in Rules) a {"Condition": name}, Fn::If and a Fn::Sub of parameters too;
// any other function fails the test.
func ruleEval(t *testing.T, conds map[string]any, v any, params map[string]string) any {
	t.Helper()
	switch v := v.(type) {
	case string:
		return v
	case float64, bool:
		return paramString(v)
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = ruleEval(t, conds, e, params)
		}
		return l
	case map[string]any:
		if len(v) != 1 {
			break
		}
		for fn, arg := range v {
			args, _ := arg.([]any)
			b := func(i int) bool {
				r, ok := ruleEval(t, conds, args[i], params).(bool)
				if !ok {
					t.Fatalf("%s: argument %v is not a condition", fn, args[i])
				}
				return r
			}
			switch fn {
			case "Condition":
				name, _ := arg.(string)
				if c, ok := conds[name]; ok {
					return ruleEval(t, conds, c, params)
				}
			case "Fn::Sub":
				if str, ok := arg.(string); ok {
					return regexp.MustCompile(`\$\{([A-Za-z0-9]+)\}`).ReplaceAllStringFunc(str, func(m string) string {
						return fmt.Sprint(ruleEval(t, conds, map[string]any{"Ref": m[2 : len(m)-1]}, params))
					})
				}
			case "Fn::If":
				if c, ok := conds[fmt.Sprint(args[0])]; ok && len(args) == 3 {
					if ruleEval(t, conds, c, params) == true {
						return ruleEval(t, conds, args[1], params)
					}
					return ruleEval(t, conds, args[2], params)
				}
			case "Ref":
				name, _ := arg.(string)
				val, ok := params[name]
				if !ok {
					t.Fatalf("rule refers to %v, not a parameter with a value", arg)
				}
				return val
			case "Fn::Equals":
				if len(args) == 2 {
					return fmt.Sprint(ruleEval(t, conds, args[0], params)) == fmt.Sprint(ruleEval(t, conds, args[1], params))
				}
			case "Fn::Not":
				if len(args) == 1 {
					return !b(0)
				}
			case "Fn::And", "Fn::Or":
				and := fn == "Fn::And"
				for i := range args {
					if b(i) != and {
						return !and
					}
				}
				return and
			case "Fn::Contains":
				if len(args) == 2 {
					l, _ := ruleEval(t, conds, args[0], params).([]any)
					return slices.Contains(l, ruleEval(t, conds, args[1], params))
				}
			}
		}
	}
	t.Fatalf("rule function %v is not one this test evaluates", v)
	return nil
}

// refusals returns the AssertDescription of every assertion the template's
// Rules fail with params: what CloudFormation answers the deploy with.
func refusals(t *testing.T, tpl cfnTemplate, params map[string]string) []string {
	t.Helper()
	var out []string
	for _, name := range sortedRuleNames(tpl) {
		r := tpl.Rules[name]
		if r.RuleCondition != nil && ruleEval(t, nil, r.RuleCondition, params) != true {
			continue
		}
		for _, a := range r.Assertions {
			if a.AssertDescription == "" {
				t.Errorf("rule %s: an assertion without AssertDescription", name)
			}
			if ruleEval(t, nil, a.Assert, params) != true {
				out = append(out, name+": "+a.AssertDescription)
			}
		}
	}
	return out
}

func sortedRuleNames(tpl cfnTemplate) []string {
	var names []string
	for n := range tpl.Rules {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// The stack refuses at deploy, in its Rules (kept by the SAM translator),
// the SMTP settings that cannot work: proxy without the secret's ARN, which
// the configuration check would refuse at the start of every function (the
// authorizer's too: EVS_SMTP is in the global environment), and direct,
// which Lambda's closed port 25 makes useless. What the configuration
// refuses on Lambda, the rules refuse first.
func TestRulesRefuseBadSMTPSettings(t *testing.T) {
	tpl := expand(t)
	env := load(t).Env
	if env["EVS_SMTP"] != "SmtpMode" || env["EVS_SMTP_PROXY_SECRET"] != "SmtpProxySecretArn" {
		t.Fatalf("EVS_SMTP = %q, EVS_SMTP_PROXY_SECRET = %q; want the parameters SmtpMode and SmtpProxySecretArn", env["EVS_SMTP"], env["EVS_SMTP_PROXY_SECRET"])
	}
	const arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:evs/smtp-exit-AbC123"
	cases := []struct {
		name      string
		overrides map[string]string
		refused   string // a word of the description; empty: deploys
	}{
		{"defaults", nil, ""},
		{"off", map[string]string{"SmtpMode": "off"}, ""},
		{"off with a secret", map[string]string{"SmtpMode": "off", "SmtpProxySecretArn": arn}, ""},
		{"proxy with its secret", map[string]string{"SmtpMode": "proxy", "SmtpProxySecretArn": arn}, ""},
		{"proxy without a secret", map[string]string{"SmtpMode": "proxy"}, "SmtpProxySecretArn"},
		{"direct", map[string]string{"SmtpMode": "direct"}, "port 25"},
		{"direct with a secret", map[string]string{"SmtpMode": "direct", "SmtpProxySecretArn": arn}, "port 25"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params := ruleParams(t, tpl, c.overrides)
			got := refusals(t, tpl, params)
			switch {
			case c.refused == "" && len(got) > 0:
				t.Errorf("refused: %q", got)
			case c.refused != "" && (len(got) != 1 || !strings.Contains(got[0], c.refused)):
				t.Errorf("refusals %q; want one naming %q", got, c.refused)
			}
			_, err := config.FromEnv(func(k string) string {
				switch k {
				case "EVS_SMTP":
					return params["SmtpMode"]
				case "EVS_SMTP_PROXY_SECRET":
					return params["SmtpProxySecretArn"]
				}
				return ""
			}, true)
			if err != nil && strings.Contains(err.Error(), "EVS_SMTP") && len(got) == 0 {
				t.Errorf("deploys, but every function would fail at start: %v", err)
			}
		})
	}
}

// The data outlives the stack: every table and the bucket stay when the
// stack is deleted or an update replaces them, and the tables refuse
// deletion unless DeletionProtection=false says the stack is a throwaway.
func TestStackKeepsItsData(t *testing.T) {
	tpl := expand(t)
	var tables, buckets []string
	for id, r := range tpl.Resources {
		switch r.Type {
		case "AWS::DynamoDB::Table":
			tables = append(tables, id)
		case "AWS::S3::Bucket":
			buckets = append(buckets, id)
		default:
			continue
		}
		if r.DeletionPolicy != "Retain" || r.UpdateReplacePolicy != "Retain" {
			t.Errorf("%s: DeletionPolicy %q, UpdateReplacePolicy %q; want Retain for both", id, r.DeletionPolicy, r.UpdateReplacePolicy)
		}
	}
	sort.Strings(tables)
	if want := []string{"BatchesTable", "IdempotencyTable", "KeysTable", "ResultsTable"}; !reflect.DeepEqual(tables, want) || !reflect.DeepEqual(buckets, []string{"InputBucket"}) {
		t.Fatalf("tables %v and buckets %v; want %v and [InputBucket]", tables, buckets, want)
	}
	cases := []struct {
		overrides map[string]string
		protected string
	}{
		{nil, "true"},
		{map[string]string{"DeletionProtection": "true"}, "true"},
		{map[string]string{"DeletionProtection": "false"}, "false"},
	}
	for _, c := range cases {
		params := ruleParams(t, tpl, c.overrides)
		for _, id := range tables {
			v, ok := tpl.Resources[id].Properties["DeletionProtectionEnabled"]
			if !ok {
				t.Errorf("%s: no DeletionProtectionEnabled", id)
				continue
			}
			if got := fmt.Sprint(ruleEval(t, tpl.Conditions, v, params)); got != c.protected {
				t.Errorf("%s with %v: DeletionProtectionEnabled %s, want %s", id, c.overrides, got, c.protected)
			}
		}
	}
}

// present says whether resource id is created with params.
func present(t *testing.T, tpl cfnTemplate, id string, params map[string]string) bool {
	t.Helper()
	r, ok := tpl.Resources[id]
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	return r.Condition == "" || ruleEval(t, tpl.Conditions, map[string]any{"Condition": r.Condition}, params) == true
}

// The alarms reach someone only if the deploy says who: AlarmEmail
// subscribes an address to the topic the stack creates, AlarmTopicArn
// names a topic with subscribers of its own, and both at once is refused
// (the address would be subscribed to nothing). Without either the stack
// deploys, and its AlarmRecipients output, which sam deploy prints, says
// that nobody is told.
func TestAlarmsReachSomeone(t *testing.T) {
	tpl := expand(t)
	const (
		email = "ops@example.com"
		topic = "arn:aws:sns:us-east-1:123456789012:ops-alarms"
	)
	cases := []struct {
		name       string
		overrides  map[string]string
		refused    string // a word of the refusal; empty: deploys
		topic      bool   // the stack creates the topic
		subscribed bool   // and subscribes AlarmEmail to it
		recipients string // a word of the AlarmRecipients output
	}{
		{"defaults", nil, "", true, false, "NOBODY"},
		{"email", map[string]string{"AlarmEmail": email}, "", true, true, email},
		{"own topic", map[string]string{"AlarmTopicArn": topic}, "", false, false, "AlarmTopicArn"},
		{"both", map[string]string{"AlarmEmail": email, "AlarmTopicArn": topic}, "AlarmEmail", false, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params := ruleParams(t, tpl, c.overrides)
			got := refusals(t, tpl, params)
			if c.refused != "" {
				if len(got) != 1 || !strings.Contains(got[0], c.refused) {
					t.Errorf("refusals %q; want one naming %s", got, c.refused)
				}
				return
			}
			if len(got) > 0 {
				t.Fatalf("refused: %q", got)
			}
			if p := present(t, tpl, "AlarmTopic", params); p != c.topic {
				t.Errorf("AlarmTopic created: %v, want %v", p, c.topic)
			}
			if p := present(t, tpl, "AlarmEmailSubscription", params); p != c.subscribed {
				t.Errorf("AlarmEmailSubscription created: %v, want %v", p, c.subscribed)
			}
			out := fmt.Sprint(ruleEval(t, tpl.Conditions, tpl.Outputs["AlarmRecipients"].Value, params))
			if !strings.Contains(out, c.recipients) {
				t.Errorf("AlarmRecipients output %q; want it to name %q", out, c.recipients)
			}
		})
	}
	sub := tpl.Resources["AlarmEmailSubscription"].Properties
	topicRef, _ := ref(sub["TopicArn"])
	endpoint, _ := ref(sub["Endpoint"])
	if sub["Protocol"] != "email" || topicRef != "AlarmTopic" || endpoint != "AlarmEmail" {
		t.Errorf("AlarmEmailSubscription %v; want Protocol email, TopicArn !Ref AlarmTopic, Endpoint !Ref AlarmEmail", sub)
	}
}

// The address quota is finite by default on the stack (0, no quota, stays
// possible when asked for): large enough for one list of the largest upload
// size a period, reaching the functions that charge it as a value the
// configuration accepts.
func TestAddressQuotaByDefault(t *testing.T) {
	tpl := expand(t)
	p := tpl.Parameters["QuotaAddresses"]
	if p == nil {
		t.Fatal("no QuotaAddresses parameter")
	}
	def := num(p["Default"])
	if def <= 0 || def < evs.UploadMaxAddresses {
		t.Errorf("QuotaAddresses default %v; want a finite quota of at least one largest list (%d)", def, evs.UploadMaxAddresses)
	}
	if mv, ok := p["MinValue"]; !ok || num(mv) != 0 {
		t.Errorf("QuotaAddresses MinValue %v; want 0, so that no quota stays possible", mv)
	}
	for _, v := range []string{paramString(p["Default"]), "0"} {
		params := ruleParams(t, tpl, map[string]string{"QuotaAddresses": v})
		cfg, err := config.FromEnv(func(k string) string {
			if k == "EVS_QUOTA_ADDRESSES" {
				return params["QuotaAddresses"]
			}
			return ""
		}, true)
		if err != nil && strings.Contains(err.Error(), "EVS_QUOTA_ADDRESSES") {
			t.Errorf("QuotaAddresses=%s: %v", v, err)
		} else if fmt.Sprint(cfg.QuotaAddresses) != v {
			t.Errorf("QuotaAddresses=%s reads as EVS_QUOTA_ADDRESSES %d", v, cfg.QuotaAddresses)
		}
	}
	for _, fn := range []string{"VerifyFunction", "RequestsFunction"} {
		env, _ := tpl.Resources[fn].Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		if r, _ := ref(vars["EVS_QUOTA_ADDRESSES"]); r != "QuotaAddresses" {
			t.Errorf("%s: EVS_QUOTA_ADDRESSES = %v, want !Ref QuotaAddresses", fn, vars["EVS_QUOTA_ADDRESSES"])
		}
	}
}

// Nothing is reserved by default: Lambda keeps 100 of an account's
// executions unreserved, so any reservation fails `sam deploy` on a new
// account whose limit is 10. Each function that may reserve takes it from
// its own parameter, 0 reserving none.
func TestNothingReservedByDefault(t *testing.T) {
	tpl := expand(t)
	const noValue = "(none)"
	n := 0
	for id, r := range tpl.Resources {
		rc, set := r.Properties["ReservedConcurrentExecutions"]
		if r.Type != "AWS::Lambda::Function" || !set {
			continue
		}
		n++
		l, _ := rc.(map[string]any)["Fn::If"].([]any)
		param, _ := ref(l[min(1, len(l)-1)])
		if len(l) != 3 || tpl.Parameters[param] == nil {
			t.Errorf("%s: ReservedConcurrentExecutions %v; want Fn::If from a parameter", id, rc)
			continue
		}
		eval := func(overrides map[string]string) string {
			params := ruleParams(t, tpl, overrides)
			params["AWS::NoValue"] = noValue
			return paramString(ruleEval(t, tpl.Conditions, rc, params))
		}
		if got := eval(nil); got != noValue {
			t.Errorf("%s reserves %s by default, want none", id, got)
		}
		if got := eval(map[string]string{param: "0"}); got != noValue {
			t.Errorf("%s: %s=0 reserves %s, want none", id, param, got)
		}
		if got := eval(map[string]string{param: "7"}); got != "7" {
			t.Errorf("%s: %s=7 reserves %s, want 7", id, param, got)
		}
	}
	if n != 3 {
		t.Errorf("%d functions may reserve concurrency, want verify, authorizer and requests", n)
	}
}

// The console's routes, which need no key and so meet no usage plan, are
// throttled apart from the API, below the stage's per-method limit, so that
// a flood of them stays a small share of the requests function's and the
// account's capacity; the API's routes keep the stage's limit.
func TestConsoleThrottledApart(t *testing.T) {
	tpl := expand(t)
	var settings []any
	for _, r := range tpl.Resources {
		if r.Type == "AWS::ApiGateway::Stage" {
			settings, _ = r.Properties["MethodSettings"].([]any)
		}
	}
	byPath := map[string]map[string]any{}
	for _, m := range settings {
		m, _ := m.(map[string]any)
		byPath[fmt.Sprint(m["ResourcePath"])+" "+fmt.Sprint(m["HttpMethod"])] = m
	}
	stageRate := num(tpl.Parameters["StageThrottleRateLimit"]["Default"])
	stageBurst := num(tpl.Parameters["StageThrottleBurstLimit"]["Default"])
	var consoleRoutes int
	for _, r := range load(t).Routes {
		// A method setting names its resource with each "/" as "~1".
		key := "/" + strings.ReplaceAll(r.Path, "/", "~1") + " " + r.Method
		m, ok := byPath[key]
		if !isConsole(r) {
			if ok {
				t.Errorf("API route %s %s has a throttle of its own; want the stage's", r.Method, r.Path)
			}
			continue
		}
		consoleRoutes++
		if !ok {
			t.Errorf("console route %s %s: no method setting %q", r.Method, r.Path, key)
			continue
		}
		rate, _ := ref(m["ThrottlingRateLimit"])
		burst, _ := ref(m["ThrottlingBurstLimit"])
		if rate != "ConsoleThrottleRateLimit" || burst != "ConsoleThrottleBurstLimit" {
			t.Errorf("%s: throttled with %v/%v; want ConsoleThrottleRateLimit/ConsoleThrottleBurstLimit", key, m["ThrottlingRateLimit"], m["ThrottlingBurstLimit"])
			continue
		}
		if r := num(tpl.Parameters[rate]["Default"]); r <= 0 || r >= stageRate {
			t.Errorf("%s: rate %v by default; want above 0 and below the stage's %v", key, r, stageRate)
		}
		if b := num(tpl.Parameters[burst]["Default"]); b <= 0 || b >= stageBurst {
			t.Errorf("%s: burst %v by default; want above 0 and below the stage's %v", key, b, stageBurst)
		}
	}
	if consoleRoutes != 4 || len(byPath) != 5 {
		t.Errorf("%d console routes and method settings %v; want 4 (the widget's too) and the stage's plus one per console route", consoleRoutes, settings)
	}
}

// EVS_BATCH_DEADLINE is a stack parameter, given to the worker (which
// finishes batches past it); its default is the configuration's, and its
// AllowedPattern takes nothing the configuration refuses, so a deploy
// never starts a worker that refuses its environment.
func TestBatchDeadlineParameter(t *testing.T) {
	tpl := expand(t)
	env, _ := tpl.Resources["WorkerFunction"].Properties["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	param, ok := ref(vars["EVS_BATCH_DEADLINE"])
	p := tpl.Parameters[param]
	if !ok || p == nil {
		t.Fatalf("the worker's EVS_BATCH_DEADLINE = %v, want !Ref of a parameter", vars["EVS_BATCH_DEADLINE"])
	}
	re := regexp.MustCompile(p["AllowedPattern"].(string))
	deadline := func(v string) (time.Duration, error) {
		cfg, err := config.FromEnv(func(k string) string {
			if k == "EVS_BATCH_DEADLINE" {
				return v
			}
			return ""
		}, true)
		if err != nil && strings.Contains(err.Error(), "EVS_BATCH_DEADLINE") {
			return 0, err
		}
		return cfg.BatchDeadline, nil
	}
	def, _ := p["Default"].(string)
	if d, err := deadline(""); err != nil || !re.MatchString(def) {
		t.Fatalf("default %q (pattern takes it: %v); the configuration's default %v, %v", def, re.MatchString(def), d, err)
	} else if got, err := deadline(def); got != d || err != nil {
		t.Errorf("parameter %s default %q gives %v (%v), want the configuration's %v", param, def, got, err, d)
	}
	for _, c := range []struct {
		v    string
		want bool // the pattern takes it
	}{
		{"36h", true}, {"90m", true}, {"1h30m", true}, {"1.5h", true},
		{"0", false}, {"0s", false}, {"-1h", false}, {"1d", false}, {"24", false}, {"", false}, {"24H", false},
	} {
		_, err := deadline(c.v)
		if took := re.MatchString(c.v); took != c.want || took && err != nil {
			t.Errorf("%q: the pattern takes it: %v, want %v; the configuration: %v", c.v, took, c.want, err)
		}
	}
}
