package api

import (
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// The decision is rendered as the domain type itself (evs.Decision carries
// the contract's JSON tags); what the edge adds is below.

// Rendered readies a domain decision for the wire: the score, which the
// stores do not keep, recomputed from the evidence, and mx an empty list
// rather than null, as the contract shows it.
func Rendered(d evs.Decision) evs.Decision {
	d.Score = verify.Score(d)
	if d.Checks.DNS.MX == nil {
		d.Checks.DNS.MX = []string{}
	}
	return d
}

// Counters is the "counters" object of the batch envelope.
type Counters struct {
	Total         int `json:"total"`
	Duplicates    int `json:"duplicates"`
	Processed     int `json:"processed"`
	Deliverable   int `json:"deliverable"`
	Undeliverable int `json:"undeliverable"`
	Risky         int `json:"risky"`
	Unknown       int `json:"unknown"`
}
