package testkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// The shared proxy accepts a CONNECT and the connection it makes comes from
// its external address, not from 127.0.0.1: the property the SOCKS5 tests
// rely on to see that the proxy was used.
func TestSOCKS5ConnectsFromExternal(t *testing.T) {
	p := testkit.SOCKS5(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from, err := p.CheckConnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if from != p.External || from == "127.0.0.1" {
		t.Fatalf("the proxied connection came from %s, want the proxy's external address %s", from, p.External)
	}
}
