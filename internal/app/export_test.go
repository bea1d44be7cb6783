package app

// OnAWSFrom is OnAWS reading the environment with getenv, on the clock
// now: each of the suite's deployments has its own environment, so its
// tests run in parallel.
var OnAWSFrom = onAWSFrom
