package main

import "github.com/evs-dev/evs/internal/verify/suggest"

// isTypo reports whether package suggest would correct d with a single
// edit. Farther matches in the free list stay there: a real provider named
// two edits from a famous one (prontomail.com) is likelier than a squat.
func isTypo(d string) bool {
	_, ok := suggest.Typo(d, 1)
	return ok
}
