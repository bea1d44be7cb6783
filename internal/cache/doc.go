// Package cache keeps what outlives one request: an account's verdicts, a
// domain's facts.
//
// Cache reuses an account's live verdicts, by the contract's rules, from a
// Store: the SQLite store of `evs serve` (with VerdictMemory in front of
// it) or DynamoDB on AWS. Facts keeps what a domain's mail server does
// (its accept-all answer, its greylisting delay) in this process's memory,
// shared by every request, batch and account; on AWS a DynamoDB item
// stands behind it (dynamostore.DomainFacts). Both expire: a verdict after
// EVS_CACHE_TTL (a risky one within the hour), a domain's facts after six
// hours. LRU, the bounded map with an expiry per entry that holds the
// facts, also holds the DNS resolver's answers (internal/verify/dnscheck).
package cache
