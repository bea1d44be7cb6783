package verify_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// pkg is what `go list -json` says of a package, the part these rules read.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "-deps=false", "github.com/evs-dev/evs/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	return pkgs
}

const (
	module = "github.com/evs-dev/evs/"
	engine = module + "internal/verify"
)

// TestLayout keeps the structure the README describes: the engine's parts
// are reached only through the engine, the engine imports nothing of AWS or
// HTTP serving, and the authorizer Lambda links neither the engine nor SQS.
func TestLayout(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for path, p := range pkgs {
		inEngine := path == engine || strings.HasPrefix(path, engine+"/")
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, engine+"/") && !inEngine && !strings.HasPrefix(path, module+"internal/testkit") {
				t.Errorf("%s imports the engine's part %s; go through %s", path, imp, engine)
			}
			if inEngine && (strings.HasPrefix(imp, "github.com/aws/") || imp == "net/http" || imp == "database/sql") {
				t.Errorf("engine package %s imports %s", path, imp)
			}
		}
	}
	cmd := exec.Command("go", "list", "-deps", module+"functions/authorizer")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(b)) {
		if dep == engine || strings.HasPrefix(dep, engine+"/") || strings.Contains(dep, "/service/sqs") {
			t.Errorf("the authorizer links %s", dep)
		}
	}
}
