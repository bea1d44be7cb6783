package server_test

import (
	"strings"
	"testing"
	"unicode"
)

// TestGeneratedClientNamesDoNotCollide: a client generated from
// api/openapi.yaml with oapi-codegen's default settings names a type for
// each schema and, for each operation, <OperationId>Response (its reply
// wrapper), <OperationId>Params and <OperationId>JSONRequestBody; a schema
// of one of those names makes the generated package fail to compile
// ("VerifyResponse redeclared", when the verify reply's schema was named
// so). Checked by hand with oapi-codegen v2.8.2 (types,client): the
// document generates a package that builds. Enum values with a tab are
// refused by the generator, so none may hold one.
func TestGeneratedClientNamesDoNotCollide(t *testing.T) {
	c := loadContract(t)
	schemas := map[string]bool{}
	for name, s := range c.doc.Components.Schemas {
		schemas[goName(name)] = true
		if s.Value == nil {
			continue
		}
		for _, v := range s.Value.Enum {
			if str, ok := v.(string); ok && strings.ContainsRune(str, '\t') {
				t.Errorf("schema %s: enum value %q holds a tab, which oapi-codegen refuses", name, str)
			}
		}
	}
	ops := 0
	for _, item := range c.doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("an operation without an operationId: %s", op.Summary)
				continue
			}
			ops++
			for _, suffix := range []string{"Response", "Params", "JSONRequestBody", "JSONBody", "TextBody", "TextRequestBody"} {
				if n := goName(op.OperationID) + suffix; schemas[n] {
					t.Errorf("schema %s collides with the type a generated client makes for operation %s", n, op.OperationID)
				}
			}
		}
	}
	if ops < 10 || len(schemas) < 10 {
		t.Fatalf("read %d operations and %d schemas; the document was not read", ops, len(schemas))
	}
}

// goName is an OpenAPI name as a generated Go type name: its first letter
// upper case.
func goName(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
