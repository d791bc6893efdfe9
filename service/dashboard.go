package service

import (
	_ "embed"
	"net/http"
)

//go:embed dashboard.html
var dashboardPage []byte

// dashboard serves the live page: every sale with its items' remaining
// stock, refreshed every second from GET /v1/sales.
func (s *Service) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
	_, _ = w.Write(dashboardPage)
}
