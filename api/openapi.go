package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of every route, status and
// problem of the server, served at GET /openapi.json. TestOpenAPI checks
// it against the router and validates real responses with it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document (JSON) that /openapi.json
// serves.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// GET /openapi.json -> 200, the OpenAPI document. Needs no identity.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(openAPI)
	}
}
