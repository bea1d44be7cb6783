package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestMain stops the moto_server a test of this binary started, if any,
// and removes the evs binary the tests built.
func TestMain(m *testing.M) {
	code := testkit.MotoMain(m)
	builds.Remove()
	os.Exit(code)
}

// samEnvFile is the env-vars file of make sam-local.
const samEnvFile = "../sam/env.json"

// The env-vars file of make sam-local sets, for every function of the
// template and no other, every variable the template's Globals declare
// (SAM CLI sets only declared variables, so a missing one would silently
// keep the template's value), AWS_ENDPOINT_URL among them; and the
// configuration accepts each function's set as it would on Lambda.
func TestEnvVarsCoverTemplate(t *testing.T) {
	tpl := load(t)
	vars, err := readEnvVars(samEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	var fns, got []string
	for _, f := range tpl.Functions {
		fns = append(fns, f.ID)
	}
	for fn := range vars {
		got = append(got, fn)
	}
	slices.Sort(fns)
	slices.Sort(got)
	if !slices.Equal(got, fns) {
		t.Errorf("env.json has functions %v, the template %v", got, fns)
	}
	if _, ok := tpl.Env["AWS_ENDPOINT_URL"]; !ok {
		t.Error("template.yaml does not declare AWS_ENDPOINT_URL, so sam local cannot set it")
	}
	for fn, v := range vars {
		for name := range tpl.Env {
			if _, ok := v[name]; !ok {
				t.Errorf("%s: env.json does not set %s", fn, name)
			}
		}
		for name := range v {
			if _, ok := tpl.Env[name]; !ok {
				t.Errorf("%s: env.json sets %s, which the template does not declare (sam local would ignore it)", fn, name)
			}
		}
		if !strings.HasPrefix(v["AWS_ENDPOINT_URL"], "http://") || !strings.HasPrefix(v["EVS_QUEUE_URL"], v["AWS_ENDPOINT_URL"]+"/") {
			t.Errorf("%s: AWS_ENDPOINT_URL %q and EVS_QUEUE_URL %q must name the same local server", fn, v["AWS_ENDPOINT_URL"], v["EVS_QUEUE_URL"])
		}
		if _, err := config.FromEnv(func(k string) string { return v[k] }, true); err != nil {
			t.Errorf("%s: the configuration refuses env.json: %v", fn, err)
		}
	}
	if _, err := resourcesOf(vars); err != nil {
		t.Error(err)
	}
}

// sam-local-init creates, on moto, the tables env.json names with the key
// schemas and TTL attributes template.yaml declares for the tables the same
// variables reference, the queue at EVS_QUEUE_URL's path and a usage plan;
// a second run keeps them and finds the same plan.
func TestSamLocalInitCreatesTemplateTables(t *testing.T) {
	tpl := load(t)
	vars, err := readEnvVars(samEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	// Unique names: the moto server is shared with other test binaries.
	tableVars := []string{"EVS_KEYS_TABLE", "EVS_BATCHES_TABLE", "EVS_RESULTS_TABLE", "EVS_IDEMPOTENCY_TABLE"}
	unique := map[string]string{}
	for _, name := range tableVars {
		unique[name] = testkit.UniqueName(t, vars["VerifyFunction"][name])
	}
	endpoint := vars["VerifyFunction"]["AWS_ENDPOINT_URL"]
	queue := strings.Replace(vars["VerifyFunction"]["EVS_QUEUE_URL"], "/evs-local-work", "/"+testkit.UniqueName(t, "evs-local-work"), 1)
	for _, v := range vars {
		for name, u := range unique {
			v[name] = u
		}
		v["EVS_QUEUE_URL"] = queue
	}
	b, err := json.Marshal(vars)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "env.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	moto := testkit.MotoEndpoint(t)
	code, out1, stderr := runEVS(ctx, nil, "sam-local-init", "--env-vars", file, "--endpoint", moto)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out2, stderr := runEVS(ctx, nil, "sam-local-init", "--env-vars", file, "--endpoint", moto+"/")
	if code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if out1 != out2 || !strings.Contains(out1, "EVS_KEYS_TABLE="+unique["EVS_KEYS_TABLE"]+"\n") {
		t.Fatalf("runs printed %q then %q", out1, out2)
	}
	planID := strings.TrimPrefix(strings.Split(strings.TrimSpace(out1), "\n")[1], "EVS_USAGE_PLAN_ID=")

	ddb := testkit.DynamoDB(t)
	for _, name := range tableVars {
		id := tpl.Env[name] // the logical id the template's !Ref names
		want, ok := tpl.Tables[id]
		if !ok {
			t.Fatalf("template.yaml sets %s to %q, which is not a table", name, id)
		}
		d, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(unique[name])})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		types := map[string]string{}
		for _, a := range d.Table.AttributeDefinitions {
			types[aws.ToString(a.AttributeName)] = string(a.AttributeType)
		}
		var key []testkit.SAMKeyAttr
		for _, k := range d.Table.KeySchema {
			key = append(key, testkit.SAMKeyAttr{Name: aws.ToString(k.AttributeName), Type: types[aws.ToString(k.AttributeName)], KeyType: string(k.KeyType)})
		}
		slices.SortStableFunc(key, func(a, b testkit.SAMKeyAttr) int {
			return strings.Compare(a.KeyType, b.KeyType) // HASH before RANGE
		})
		if !slices.Equal(key, want.Key) {
			t.Errorf("%s: created key %v, template %v", id, key, want.Key)
		}
		ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(unique[name])})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != want.TTL {
			t.Errorf("%s: TTL attribute %q, template %q", id, got, want.TTL)
		}
	}
	q, err := testkit.SQS(t).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue[strings.LastIndexByte(queue, '/')+1:])})
	if err != nil || !strings.HasSuffix(queue, strings.TrimPrefix(aws.ToString(q.QueueUrl), moto)) {
		t.Errorf("queue: %v %v (env.json %s)", q, err, queue)
	}
	if !strings.HasPrefix(queue, endpoint) {
		t.Errorf("EVS_QUEUE_URL %s is not on AWS_ENDPOINT_URL %s", queue, endpoint)
	}
	plan, err := apigateway.NewFromConfig(testkit.AWSConfig(t)).GetUsagePlan(ctx, &apigateway.GetUsagePlanInput{UsagePlanId: aws.String(planID)})
	if err != nil || aws.ToString(plan.Name) != localUsagePlanName {
		t.Errorf("usage plan %s: %v %v", planID, plan, err)
	}
}

// Functions that disagree on their tables are refused: sam local would run
// them against different data.
func TestResourcesMustAgree(t *testing.T) {
	v := func(keys string) map[string]string {
		return map[string]string{"EVS_KEYS_TABLE": keys, "EVS_BATCHES_TABLE": "b", "EVS_RESULTS_TABLE": "r", "EVS_IDEMPOTENCY_TABLE": "i", "EVS_INPUT_BUCKET": "in", "EVS_QUEUE_URL": "http://h:5000/1/q"}
	}
	if _, err := resourcesOf(map[string]map[string]string{"A": v("k"), "B": v("k2")}); err == nil {
		t.Error("different keys tables accepted")
	}
	if _, err := resourcesOf(map[string]map[string]string{"A": v("")}); err == nil {
		t.Error("a missing table name accepted")
	}
	if r, err := resourcesOf(map[string]map[string]string{"A": v("k"), "B": v("k")}); err != nil || r.Tables.Keys != "k" {
		t.Errorf("%+v %v", r, err)
	}
}

// make sam-local stops with one line naming what is missing when the SAM
// CLI or Docker is not installed (neither runs in this suite).
func TestSamLocalNeedsSamAndDocker(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	cases := []struct {
		fakes []string
		want  string
	}{
		{nil, "AWS SAM CLI"},
		{[]string{"sam"}, "Docker"},
	}
	for _, c := range cases {
		for _, f := range c.fakes {
			if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bash, "../scripts/sam-local.sh")
		cmd.Env = []string{"PATH=" + bin}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("with %v on PATH: error %v, stderr %q; want one line naming %s", c.fakes, err, stderr.String(), c.want)
		}
	}
}

// --help is an answer, not a mistake: usage on stdout, exit 0; a wrong flag
// or an argument is a usage error (exit 2) that touches no server.
func TestSamLocalInitUsage(t *testing.T) {
	ctx := context.Background()
	for _, h := range []string{"--help", "-h"} {
		code, out, stderr := runEVS(ctx, nil, "sam-local-init", h)
		if code != 0 || !strings.Contains(out, "Usage:\n  evs sam-local-init") || !strings.Contains(out, "--endpoint URL") || stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", h, code, out, stderr)
		}
	}
	for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--endpoint", "127.0.0.1:5000"}} {
		code, out, stderr := runEVS(ctx, nil, append([]string{"sam-local-init"}, args...)...)
		if code != 2 || out != "" || stderr == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and a message", args, code, out, stderr)
		}
	}
	if _, out, _ := runEVS(ctx, nil, "help"); !strings.Contains(out, "Development (make sam-local):\n  sam-local-init") {
		t.Errorf("the main usage does not list sam-local-init under its development heading:\n%s", out)
	}
}
