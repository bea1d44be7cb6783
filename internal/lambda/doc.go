// Package lambda is the adapter between AWS Lambda and the service: what a
// function under functions/ needs of Lambda and AWS that `evs serve` does
// not. (The SDK's package of the same name is imported as awslambda.)
//
// API Gateway (REST API): Proxy turns a proxy event into an *http.Request
// and the reply into the proxy response; Authorizer answers REQUEST
// authorizer events with the key lookup `evs serve` runs as middleware.
// They are ours rather than a library's because they carry the authorizer's
// principal and API Gateway's request id into the request's context, and
// route by the matched resource and its path parameters, not the raw path,
// which behind a custom domain holds the base path mapping.
//
// Cold start: Check and Region make sure the AWS region and resources a
// function or evs command was given exist. Without them, a missing table or
// a mistyped region surfaces on every call as "The store is unavailable;
// retry.", which no retry fixes; with them, it is one line naming the
// resource, where its name came from and what to do. Only definite answers
// stop the start (a resource the service says does not exist, an impossible
// region, an endpoint that does not resolve); anything else is left to the
// calls. ResolveSMTPProxy reads the SOCKS5 exits from Secrets Manager, here
// so that internal/config stays free of AWS.
//
// The SQS side is internal/app's: it links the engine and the SQS client,
// and the authorizer function, which imports this package, must link
// neither (internal/verify's TestLayout).
package lambda
