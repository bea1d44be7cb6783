package testkit

// The SAM template reader: the parts of template.yaml that Go code must agree
// with (API routes and the functions behind them, gateway responses, DynamoDB
// key schemas, the functions' environment). The template is the deployment's
// source of truth and the Go code the local stand-in's; they are written
// separately, so a test compares them rather than trusting that both were
// edited together.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// SAMRoute is one API event of a function.
type SAMRoute struct {
	Function string // logical id of the function, e.g. "VerifyFunction"
	Path     string
	Method   string // as written: "ANY", "POST", ...
	// Authorizer and APIKeyRequired are the event's own Auth, as written
	// ("" when it has none: the API's defaults apply), e.g. "NONE" and
	// "false" for a route open to anyone.
	Authorizer     string
	APIKeyRequired string
}

// SAMGatewayResponse is one entry of the API's GatewayResponses.
type SAMGatewayResponse struct {
	// Status is the declared status code, 0 when the template leaves it to
	// API Gateway (DEFAULT_4XX keeps the original 4xx status).
	Status int
	// Body is the application/json response template.
	Body string
	// Headers maps header names to their mapping expressions, e.g.
	// "X-Request-Id" → "context.requestId", "Retry-After" → "'1'".
	Headers map[string]string
}

// SAMKeyAttr is one attribute of a table's primary key.
type SAMKeyAttr struct {
	Name    string
	Type    string // S, N or B
	KeyType string // HASH or RANGE
}

// SAMTable is a DynamoDB table's key schema, TTL attribute and global
// secondary indexes.
type SAMTable struct {
	Key []SAMKeyAttr // HASH first
	TTL string       // the TTL attribute name, "" when none
	// Indexes are the global secondary indexes by name.
	Indexes map[string]SAMIndex
}

// SAMIndex is a global secondary index: its key schema and projection.
type SAMIndex struct {
	Key        []SAMKeyAttr // HASH first
	Projection string       // ALL, KEYS_ONLY or INCLUDE
}

// SAMFunction is one AWS::Serverless::Function, with the Globals applied.
type SAMFunction struct {
	ID            string // logical id, e.g. "VerifyFunction"
	CodeURI       string
	Handler       string
	Runtime       string
	Architectures []string
	BuildMethod   string // Metadata.BuildMethod ("makefile")
	// SQSBatchSize is the BatchSize of its SQS event: the most messages
	// an invocation gets (0: no SQS event).
	SQSBatchSize int
}

// SAMTemplate is what LoadSAMTemplate extracts.
type SAMTemplate struct {
	Functions        []SAMFunction
	Routes           []SAMRoute
	GatewayResponses map[string]SAMGatewayResponse
	// Tables is keyed by logical id ("KeysTable").
	Tables map[string]SAMTable
	// Env maps the functions' global environment variable names to the
	// logical id they reference (for !Ref) or their literal value.
	Env map[string]string
}

// LoadSAMTemplate parses the SAM template at path.
func LoadSAMTemplate(path string) (*SAMTemplate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSAMTemplate(b)
}

// ParseSAMTemplate parses a SAM template. CloudFormation's short-form intrinsics
// (!Ref, !GetAtt, ...) are YAML tags, which a generic decoder does not
// know, so the template is walked as yaml.Nodes.
func ParseSAMTemplate(b []byte) (*SAMTemplate, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("samtemplate: empty document")
	}
	root := doc.Content[0]
	t := &SAMTemplate{GatewayResponses: map[string]SAMGatewayResponse{}, Tables: map[string]SAMTable{}, Env: map[string]string{}}
	resources := get(root, "Resources")
	if resources == nil {
		return nil, fmt.Errorf("samtemplate: no Resources")
	}
	for _, id := range keys(resources) {
		res := get(resources, id)
		props := get(res, "Properties")
		switch scalar(get(res, "Type")) {
		case "AWS::Serverless::Function":
			fn := SAMFunction{ID: id, BuildMethod: scalar(get(get(res, "Metadata"), "BuildMethod"))}
			globals := get(get(root, "Globals"), "Function")
			fn.CodeURI = or(scalar(get(props, "CodeUri")), scalar(get(globals, "CodeUri")))
			fn.Handler = or(scalar(get(props, "Handler")), scalar(get(globals, "Handler")))
			fn.Runtime = or(scalar(get(props, "Runtime")), scalar(get(globals, "Runtime")))
			archs := items(get(props, "Architectures"))
			if archs == nil {
				archs = items(get(globals, "Architectures"))
			}
			for _, a := range archs {
				fn.Architectures = append(fn.Architectures, scalar(a))
			}
			events := get(props, "Events")
			for _, ev := range keys(events) {
				e := get(events, ev)
				if scalar(get(e, "Type")) == "SQS" {
					fn.SQSBatchSize, _ = strconv.Atoi(scalar(get(get(e, "Properties"), "BatchSize")))
				}
				if scalar(get(e, "Type")) != "Api" {
					continue
				}
				p := get(e, "Properties")
				auth := get(p, "Auth")
				t.Routes = append(t.Routes, SAMRoute{Function: id, Path: scalar(get(p, "Path")), Method: scalar(get(p, "Method")),
					Authorizer: scalar(get(auth, "Authorizer")), APIKeyRequired: scalar(get(auth, "ApiKeyRequired"))})
			}
			t.Functions = append(t.Functions, fn)
		case "AWS::Serverless::Api":
			grs := get(props, "GatewayResponses")
			for _, typ := range keys(grs) {
				g := get(grs, typ)
				gr := SAMGatewayResponse{Headers: map[string]string{}}
				if s := scalar(get(g, "StatusCode")); s != "" {
					n, err := strconv.Atoi(s)
					if err != nil {
						return nil, fmt.Errorf("samtemplate: %s StatusCode %q: %w", typ, s, err)
					}
					gr.Status = n
				}
				gr.Body = scalar(get(get(g, "ResponseTemplates"), "application/json"))
				hs := get(get(g, "ResponseParameters"), "Headers")
				for _, h := range keys(hs) {
					gr.Headers[h] = scalar(get(hs, h))
				}
				t.GatewayResponses[typ] = gr
			}
		case "AWS::DynamoDB::Table":
			types := map[string]string{}
			for _, a := range items(get(props, "AttributeDefinitions")) {
				types[scalar(get(a, "AttributeName"))] = scalar(get(a, "AttributeType"))
			}
			keySchema := func(n *yaml.Node) []SAMKeyAttr {
				var key []SAMKeyAttr
				for _, k := range items(n) {
					name := scalar(get(k, "AttributeName"))
					key = append(key, SAMKeyAttr{Name: name, Type: types[name], KeyType: scalar(get(k, "KeyType"))})
				}
				sort.SliceStable(key, func(i, j int) bool { return key[i].KeyType == "HASH" && key[j].KeyType != "HASH" })
				return key
			}
			tb := SAMTable{Key: keySchema(get(props, "KeySchema"))}
			for _, gsi := range items(get(props, "GlobalSecondaryIndexes")) {
				if tb.Indexes == nil {
					tb.Indexes = map[string]SAMIndex{}
				}
				tb.Indexes[scalar(get(gsi, "IndexName"))] = SAMIndex{
					Key:        keySchema(get(gsi, "KeySchema")),
					Projection: scalar(get(get(gsi, "Projection"), "ProjectionType")),
				}
			}
			if ttl := get(props, "TimeToLiveSpecification"); ttl != nil && scalar(get(ttl, "Enabled")) == "true" {
				tb.TTL = scalar(get(ttl, "AttributeName"))
			}
			t.Tables[id] = tb
		}
	}
	env := get(get(get(get(root, "Globals"), "Function"), "Environment"), "Variables")
	for _, k := range keys(env) {
		t.Env[k] = scalar(get(env, k))
	}
	return t, nil
}

// get returns the value of key in mapping node m (nil when absent or when
// m is not a mapping).
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// keys lists a mapping's keys in document order.
func keys(m *yaml.Node) []string {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var ks []string
	for i := 0; i < len(m.Content); i += 2 {
		ks = append(ks, m.Content[i].Value)
	}
	return ks
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func items(s *yaml.Node) []*yaml.Node {
	if s == nil || s.Kind != yaml.SequenceNode {
		return nil
	}
	return s.Content
}

// scalar returns a scalar's value; for a short-form !Ref the referenced
// logical id (so "!Ref KeysTable" reads as "KeysTable").
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return strings.TrimSpace(n.Value)
}
