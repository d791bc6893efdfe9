package service

import (
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestVerifiedTokenCache: a cached token is still held to its exp and nbf,
// and only a token verified with this secret is ever cached.
func TestVerifiedTokenCache(t *testing.T) {
	a := newAuth("secret", "admin")
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	sign := func(secret string, claims jwt.MapClaims) string {
		tok, err := SignUser(secret, "alice", claims)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// The parser checks exp against the real clock: give it one far ahead,
	// and move the cache's clock.
	exp := time.Now().Add(time.Hour).Unix()
	now = time.Unix(exp-10, 0)
	tok := sign("secret", jwt.MapClaims{"exp": exp})
	for i := range 2 { // verified, then from the cache
		if u, ok := a.userOf(tok); !ok || u != "alice" {
			t.Fatalf("call %d: %q, %v", i, u, ok)
		}
	}
	if _, ok := a.verified.get(tok); !ok {
		t.Fatal("a verified token was not cached")
	}
	now = time.Unix(exp, 0)
	if _, ok := a.userOf(tok); ok {
		t.Error("a cached token was accepted at its exp")
	}
	// nbf: cached once valid, refused by the cache before it.
	nbf := time.Now().Add(-time.Minute).Unix()
	tok2 := sign("secret", jwt.MapClaims{"nbf": nbf})
	now = time.Unix(nbf, 0)
	if _, ok := a.userOf(tok2); !ok {
		t.Fatal("a valid token with nbf was refused")
	}
	now = time.Unix(nbf-1, 0)
	if _, ok := a.userOf(tok2); ok {
		t.Error("a cached token was accepted before its nbf")
	}
	// Another secret's token is never cached, however often it comes.
	forged := sign("other", jwt.MapClaims{})
	for range 3 {
		if _, ok := a.userOf(forged); ok {
			t.Fatal("a token of another secret was accepted")
		}
	}
	if _, ok := a.verified.get(forged); ok {
		t.Error("a token that failed verification was cached")
	}
	// The cache stays bounded.
	for i := range maxVerifiedTokens + 10 {
		a.verified.put(strconv.Itoa(i), verifiedToken{user: "x"})
	}
	if n := len(a.verified.m); n > maxVerifiedTokens {
		t.Errorf("cache holds %d tokens, bound %d", n, maxVerifiedTokens)
	}
}

// BenchmarkUserOf measures a buyer token's check: verified (HS256 and
// claims parsing) against found in the cache of verified tokens.
//
//	go test -run '^$' -bench UserOf ./service/
func BenchmarkUserOf(b *testing.B) {
	tok, err := SignUser("secret", "alice", jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	for _, cached := range []bool{false, true} {
		b.Run("cached="+strconv.FormatBool(cached), func(b *testing.B) {
			a := newAuth("secret", "admin")
			b.ReportAllocs()
			for b.Loop() {
				if !cached {
					clear(a.verified.m)
				}
				if _, ok := a.userOf(tok); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
