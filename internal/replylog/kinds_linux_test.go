package replylog_test

// syncKinds are the ways a log syncs here, each of which the concurrency
// and reopen test runs with.
var syncKinds = []string{"io_uring", "aio", "fdatasync"}
