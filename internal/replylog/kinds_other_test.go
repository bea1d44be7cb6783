//go:build !linux

package replylog_test

var syncKinds = []string{"fsync"}
