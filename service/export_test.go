package service

import "net/http"

// Handler is the service's HTTP handler, for benchmarks that call it
// without a connection.
func (s *Service) Handler() http.Handler { return s.http.Handler }
