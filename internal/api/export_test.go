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

// WidgetScript is the widget's source, as served without compression.
func WidgetScript() []byte { return widgetJS }

// WidgetVersion names the embedded widget: 16 hex digits of its content's
// SHA-256, the value of its ETag and of the ?v= that pins it.
func WidgetVersion() string { return widgetVersion }

// WidgetGzipped is the widget as served to a client that takes gzip.
func WidgetGzipped() []byte { return widgetGz }
