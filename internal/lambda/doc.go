// Package lambda is the adapter between AWS Lambda and the service: what a
// function under functions/ needs of Lambda and AWS that `evs serve` does
// not. (The AWS SDK's package of the same name is imported as awslambda
// beside it.)
//
// API Gateway (REST API): Proxy turns a Lambda proxy event into an
// *http.Request and the handler's reply into the proxy response, and
// Authorizer answers API Gateway's REQUEST authorizer events with the same
// key lookup `evs serve` runs as middleware. They are ours rather than a
// library's because they must carry what only this API's events hold into
// the request's context — the REQUEST authorizer's principal and API
// Gateway's request id — and must route by the matched resource and its
// path parameters, not the raw path, which behind a custom domain also
// holds the base path mapping. Everything else is the plain translation of
// fields, in about a hundred lines.
//
// Cold start: what a Lambda function, or an evs command that uses AWS,
// checks and resolves in AWS once, at start, before it serves anything.
// Check and Region make sure the AWS region and resources it was given
// exist. Without them, a table that was never created or a region name
// typed wrong surfaces on every call as "The store is unavailable; retry.",
// which no retry fixes; with them, it is one line naming the resource,
// where its name came from and what to do. Only definite answers stop the
// start: a table or queue the service says does not exist, a region that
// cannot be one, an endpoint whose name does not resolve. Anything else (no
// permission to describe, throttling, a slow network) is left to the calls
// themselves. ResolveSMTPProxy reads the SOCKS5 exit of the functions that
// dial SMTP from AWS Secrets Manager. It is here rather than in
// internal/config so that the configuration stays free of AWS.
//
// The SQS side (the queue beneath batch.Worker, the worker Lambda's SQS
// handler, CheckQueue) is package sqsqueue's, not this one's: it links the
// engine and the SQS client, and the authorizer function, which imports
// this package, must link neither (internal/verify's TestLayout).
package lambda
