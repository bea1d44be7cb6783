package sqlitestore

// StartHelper lends the external tests (package sqlitestore_test) the
// helper-process starter of the crash test.
var StartHelper = startHelper

// AwaitKill lends them awaitKill.
var AwaitKill = awaitKill
