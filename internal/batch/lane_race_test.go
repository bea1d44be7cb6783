//go:build race

package batch_test

// The whole lane takes minutes under the race detector: its tenth only.
func init() { laneFull = false }
