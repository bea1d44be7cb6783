package app_test

import (
	"testing"
)

// TestUnsortedListGroupedAtCreation: on AWS the planner reads a batch's
// input a window at a time; a list whose domains take turns (as users
// upload them) is grouped by domain when it is created, so each domain's
// addresses still come in one work message (one SMTP session and one
// accept-all probe), not one per window they were spread over. `evs serve`
// plans a batch whole, so there the grouping is its LocalQueue's.
func TestUnsortedListGroupedAtCreation(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t) // windows of 100 addresses
	const n, domains = 500, 50
	id, _ := w.create(n) // address i at domain i%50: ten windows, every domain in each
	w.drain(id)
	messages := map[string]int{} // domain → work messages carrying it
	addresses := 0
	for _, m := range w.works {
		seen := map[string]bool{}
		for _, it := range m.Items {
			addresses++
			if !seen[it.Domain] {
				seen[it.Domain] = true
				messages[it.Domain]++
			}
		}
	}
	if addresses != n || len(messages) != domains {
		t.Fatalf("work messages carried %d addresses of %d domains, want %d of %d", addresses, len(messages), n, domains)
	}
	for d, k := range messages {
		if k != 1 {
			t.Errorf("domain %s came in %d work messages, want 1", d, k)
		}
	}
}
