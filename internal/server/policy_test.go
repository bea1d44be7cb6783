package server

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestPolicy: patterns mean what they mean in IAM — '*' any run of
// characters, across '/', '?' exactly one, every other character itself,
// with no escapes — and an explicit Deny wins over any Allow.
func TestPolicy(t *testing.T) {
	const stageARN = "arn:aws:execute-api:local:000000000000:evs/local/"
	allow := func(resources ...string) events.IAMPolicyStatement {
		return events.IAMPolicyStatement{Effect: "Allow", Action: []string{"execute-api:Invoke"}, Resource: resources}
	}
	deny := func(resources ...string) events.IAMPolicyStatement {
		return events.IAMPolicyStatement{Effect: "Deny", Action: []string{"execute-api:Invoke"}, Resource: resources}
	}
	verify := stageARN + "POST/v1/verify"
	cases := []struct {
		name  string
		stmts []events.IAMPolicyStatement
		arn   string
		want  bool
	}{
		{"the stage", []events.IAMPolicyStatement{allow(stageARN + "*/*")}, verify, true},
		{"'*' crosses '/' but the '/' must be there", []events.IAMPolicyStatement{allow(stageARN + "*/*")}, stageARN + "POST", false},
		{"another stage", []events.IAMPolicyStatement{allow(stageARN + "*/*")}, "arn:aws:execute-api:local:000000000000:evs/other/POST/v1/verify", false},
		{"exact", []events.IAMPolicyStatement{allow(verify)}, verify, true},
		{"exact, with a trailing slash", []events.IAMPolicyStatement{allow(verify)}, verify + "/", false},
		{"'*' may match nothing", []events.IAMPolicyStatement{allow(verify + "*")}, verify, true},
		{"'?' is one character", []events.IAMPolicyStatement{allow(stageARN + "P?ST/*")}, verify, true},
		{"'?' is not none", []events.IAMPolicyStatement{allow(stageARN + "PO?ST/*")}, verify, false},
		{"'?' is a whole character", []events.IAMPolicyStatement{allow("x?")}, "xé", true},
		{"a '*' of the path is just a character", []events.IAMPolicyStatement{allow(stageARN + "GET/v1/requests/*/results")}, stageARN + "GET/v1/requests/**/results", true},
		{"'*' across a newline", []events.IAMPolicyStatement{allow(stageARN + "*")}, stageARN + "GET/a\nb", true},
		{"'.' is a dot", []events.IAMPolicyStatement{allow(stageARN + "GET/a.b")}, stageARN + "GET/axb", false},
		{"brackets and parentheses are themselves", []events.IAMPolicyStatement{allow(stageARN + "GET/[a](b)+")}, stageARN + "GET/[a](b)+", true},
		{"'\\' escapes nothing", []events.IAMPolicyStatement{allow(`a\*`)}, `a\bc`, true},
		{"'\\' is itself", []events.IAMPolicyStatement{allow(`a\*`)}, `a*`, false},
		{"Deny wins", []events.IAMPolicyStatement{allow(stageARN + "*/*"), deny(verify)}, verify, false},
		{"a Deny elsewhere", []events.IAMPolicyStatement{allow(stageARN + "*/*"), deny(stageARN + "GET/*")}, verify, true},
		{"Deny alone", []events.IAMPolicyStatement{deny(stageARN + "*/*")}, verify, false},
		{"no statement", nil, verify, false},
		{"an action pattern", []events.IAMPolicyStatement{{Effect: "Allow", Action: []string{"execute-api:*"}, Resource: []string{"*"}}}, verify, true},
		{"another action", []events.IAMPolicyStatement{{Effect: "Allow", Action: []string{"execute-api:ManageConnections"}, Resource: []string{"*"}}}, verify, false},
		{"an unreadable Deny allows nothing", []events.IAMPolicyStatement{allow("*"), deny("\xff*")}, verify, false},
	}
	for _, c := range cases {
		p := compilePolicy(events.APIGatewayCustomAuthorizerPolicy{Version: "2012-10-17", Statement: c.stmts})
		if got := p.allows(c.arn); got != c.want {
			t.Errorf("%s: allows(%q) = %v, want %v", c.name, c.arn, got, c.want)
		}
	}
}
