package console

import (
	"net/http"

	"github.com/evs-dev/evs/internal/api"
)

// The API Gateway resources of the console on the AWS stack (template.yaml,
// on the requests function, with no authorizer). A REST API matches
// /console/ to RootResource too (a trailing slash names no other
// resource), keeping the slash: that one resource both redirects /console
// and serves the page at /console/.
const (
	RootResource  = "/console"
	FilesResource = "/console/{proxy+}"
)

// Mount serves h, a console handler (New), on mux at Path and at Path
// without its slash, with no key: the page asks for one and sends it on
// its own API calls. Each call's log line names the route Path.
func Mount(mux *http.ServeMux, h http.Handler) {
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.CallFromContext(r.Context()).Route = Path
		h.ServeHTTP(w, r)
	})
	mux.Handle(RootResource, web)
	mux.Handle(Path, web)
}
