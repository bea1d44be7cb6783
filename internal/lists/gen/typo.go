package main

// isTypo reports whether d looks like a typo of a well-known provider.
// Replaced by the suggest package's matcher once it exists.
func isTypo(d string) bool { return false }
