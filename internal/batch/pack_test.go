package batch_test

import (
	"fmt"
	"testing"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

func items(spec ...string) []evs.Item {
	var out []evs.Item
	for _, d := range spec {
		out = append(out, evs.Item{Seq: len(out), Email: fmt.Sprintf("u%d@%s", len(out), d), Domain: d})
	}
	return out
}

func TestPack(t *testing.T) {
	t.Parallel()
	many := make([]string, 450)
	for i := range many {
		many[i] = "big.example"
	}
	cases := []struct {
		name  string
		items []evs.Item
		size  int
		want  []int // items per message
	}{
		{"one domain fits", items("a", "a", "a"), 200, []int{3}},
		{"small domains share a message", items("a", "b", "a", "c"), 200, []int{4}},
		{"a domain is not split when it fits the next message", items("a", "a", "b", "b", "b"), 3, []int{2, 3}},
		{"a big domain is split into full messages", items(many...), 200, []int{200, 200, 50}},
		{"invalid addresses travel alone or packed", items("", "", "a"), 2, []int{2, 1}},
		{"nothing", nil, 200, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := batch.Pack("acct", "batch", c.items, c.size)
			var got []int
			seen := map[int]bool{}
			for _, m := range ms {
				if m.Kind != batch.KindWork || m.AccountID != "acct" || m.BatchID != "batch" {
					t.Fatalf("message header %+v", m)
				}
				got = append(got, len(m.Items))
				for _, it := range m.Items {
					if seen[it.Seq] {
						t.Fatalf("seq %d packed twice", it.Seq)
					}
					seen[it.Seq] = true
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("message sizes %v, want %v", got, c.want)
			}
			if len(seen) != len(c.items) {
				t.Fatalf("%d of %d items packed", len(seen), len(c.items))
			}
		})
	}
}
