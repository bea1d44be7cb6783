// Package cache keeps what outlives one request: an account's verdicts
// (Cache, over a Store) and a domain's facts (Facts, in memory, with a
// DynamoDB item behind it on AWS). Both expire. LRU, the bounded map with
// an expiry per entry, also holds the DNS resolver's answers.
package cache
