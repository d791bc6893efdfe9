package service

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestTokenTimeClaims: a buyer's token is held to its exp and nbf at the
// service's clock, and a token of another secret is refused however often
// it comes. (This was TestVerifiedTokenCache; the cache of verified tokens
// is gone, its checks of exp, nbf and forgeries stay.)
func TestTokenTimeClaims(t *testing.T) {
	a := newAuth("secret", "admin")
	var now time.Time
	a.now = func() time.Time { return now }
	sign := func(secret string, claims jwt.MapClaims) string {
		tok, err := SignUser(secret, "alice", claims)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	exp := time.Now().Add(time.Hour).Unix()
	now = time.Unix(exp-10, 0)
	tok := sign("secret", jwt.MapClaims{"exp": exp})
	for i := range 2 {
		if u, ok := a.userOf(tok); !ok || u != "alice" {
			t.Fatalf("call %d: %q, %v", i, u, ok)
		}
	}
	now = time.Unix(exp-1, 999_999_999)
	if _, ok := a.userOf(tok); !ok {
		t.Error("a token was refused in the last second before its exp")
	}
	now = time.Unix(exp, 0)
	if _, ok := a.userOf(tok); ok {
		t.Error("a token was accepted at its exp")
	}
	nbf := time.Now().Add(-time.Minute).Unix()
	tok2 := sign("secret", jwt.MapClaims{"nbf": nbf})
	now = time.Unix(nbf, 0)
	if _, ok := a.userOf(tok2); !ok {
		t.Fatal("a valid token with nbf was refused")
	}
	now = time.Unix(nbf-1, 999_999_999)
	if _, ok := a.userOf(tok2); ok {
		t.Error("a token was accepted before its nbf")
	}
	forged := sign("other", jwt.MapClaims{})
	for range 3 {
		if _, ok := a.userOf(forged); ok {
			t.Fatal("a token of another secret was accepted")
		}
	}
}

// BenchmarkUserOf measures a buyer token's check.
//
//	go test -run '^$' -bench UserOf ./service/
func BenchmarkUserOf(b *testing.B) {
	tok, err := SignUser("secret", "alice", jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	a := newAuth("secret", "admin")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := a.userOf(tok); !ok {
			b.Fatal("refused")
		}
	}
}
