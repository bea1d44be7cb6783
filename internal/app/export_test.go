package app

// OnAWSFrom is OnAWS reading the environment with getenv: each of the
// suite's deployments has its own, so its tests run in parallel.
var OnAWSFrom = onAWSFrom
