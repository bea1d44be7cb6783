package api

import (
	"maps"
	"slices"
)

// What the tests of package api_test use beside the package's API.

// ErrorCodes returns every error code of the contract, for tests and docs.
func ErrorCodes() []string {
	return slices.Collect(maps.Keys(statusByCode))
}
