package api

import (
	"net/http"
)

// The API Gateway resources of the console on the AWS stack (template.yaml,
// on the requests function, with no authorizer). A REST API matches
// /console/ to ConsoleRootResource too (a trailing slash names no other
// resource), keeping the slash: that one resource both redirects /console
// and serves the page at /console/.
const (
	ConsoleRootResource  = "/console"
	ConsoleFilesResource = "/console/{proxy+}"
)

// MountConsole serves h, a console handler (NewConsole), on mux at ConsolePath and at ConsolePath
// without its slash, with no key: the page asks for one and sends it on
// its own API calls. Each call's log line names the route ConsolePath.
func MountConsole(mux *http.ServeMux, h http.Handler) {
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		CallFromContext(r.Context()).Route = ConsolePath
		h.ServeHTTP(w, r)
	})
	mux.Handle(ConsoleRootResource, web)
	mux.Handle(ConsolePath, web)
}
