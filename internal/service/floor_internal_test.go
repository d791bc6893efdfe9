package service

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestFloorServer: the floor answers a valid buyer's token with 201 and
// its fixed order-shaped body, on any path, and anything else with the
// service's 401, as a buy's token is checked.
func TestFloorServer(t *testing.T) {
	const secret = "floor-test-secret"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewFloorServer(secret)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	sign := func(secret, user string, exp time.Time) string {
		tok, err := SignUser(secret, user, jwt.MapClaims{"exp": exp.Unix()})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	day := time.Now().Add(24 * time.Hour)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name, path, authorization string
		status                    int
	}{
		{"a buyer's token", "/v1/sales/cost/orders", "Bearer " + sign(secret, "b1", day), http.StatusCreated},
		{"any path", "/elsewhere", "bearer " + sign(secret, "b2", day), http.StatusCreated},
		{"no token", "/v1/sales/cost/orders", "", http.StatusUnauthorized},
		{"another secret's token", "/v1/sales/cost/orders", "Bearer " + sign("other", "b1", day), http.StatusUnauthorized},
		{"an expired token", "/v1/sales/cost/orders", "Bearer " + sign(secret, "b1", time.Now().Add(-time.Minute)), http.StatusUnauthorized},
		{"not a bearer", "/v1/sales/cost/orders", "Basic " + sign(secret, "b1", day), http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+tc.path, strings.NewReader(`{"items":[{"sku":"A","qty":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.authorization != "" {
			req.Header.Set("Authorization", tc.authorization)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d application/json", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status)
		}
		switch {
		case tc.status == http.StatusCreated && string(body) != string(floorReply):
			t.Errorf("%s: body %q, want the floor's %q", tc.name, body, floorReply)
		case tc.status == http.StatusUnauthorized && !strings.Contains(string(body), `"code":"unauthenticated"`):
			t.Errorf("%s: body %q, want the service's unauthenticated error", tc.name, body)
		}
	}
}
