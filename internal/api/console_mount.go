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
// GET / answers 302 to the console. The sign-up widget, the other file
// served with no key, comes with it (MountWidget).
func MountConsole(mux *http.ServeMux, h http.Handler) {
	MountWidget(mux)
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		CallFromContext(r.Context()).Route = ConsolePath
		h.ServeHTTP(w, r)
	})
	mux.Handle(ConsoleRootResource, web)
	mux.Handle(ConsolePath, web)
	// The service's root is where a person lands: send the browser on to
	// the console. The Location is relative, so it keeps an API Gateway
	// stage's prefix (/prod/ → /prod/console/).
	mux.Handle("GET "+HomeResource+"{$}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		CallFromContext(r.Context()).Route = HomeResource
		w.Header().Set("Location", "console/")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusFound)
	}))
}

// HomeResource is the root of the service, which sends a browser to the
// console (the API Gateway resource "/" on the AWS stack).
const HomeResource = "/"
