package service

import (
	_ "embed"
	"net/http"
)

// openAPI is the contract as an OpenAPI 3 document. A test checks that it
// names exactly the routes the service registers.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
