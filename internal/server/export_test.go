package server

import "net/http"

// What the tests of package server_test use beside the package's API.

// Handler is the HTTP face of the server.
func (s *Server) Handler() http.Handler { return s.edge }
