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

// MountConsole serves h, a console handler, on mux at ConsolePath with and
// without its slash, with no key, and the sign-up widget (MountWidget).
// GET / answers 302 to the console.
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
