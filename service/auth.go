package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/inventory"
)

// auth checks the two kinds of bearer token: buyers' HS256 JWTs (the user
// id is the "sub" claim) and the operators' admin token.
type auth struct {
	secret    []byte
	adminHash [sha256.Size]byte
	parser    *jwt.Parser
	verified  verifiedTokens
	now       func() time.Time
}

func newAuth(jwtSecret, adminToken string) *auth {
	return &auth{
		secret:    []byte(jwtSecret),
		adminHash: sha256.Sum256([]byte(adminToken)),
		// The algorithm is pinned: "none", RS256 and every other alg are refused.
		parser:   jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()})),
		verified: verifiedTokens{m: map[string]verifiedToken{}},
		now:      time.Now,
	}
}

// maxVerifiedTokens bounds the cache of verified buyer tokens (about 300
// bytes each): a crowd of buyers retrying a flash sale sends the same
// token again and again, and checking its signature and parsing its claims
// costs more than the rest of the request's CPU in Go.
const maxVerifiedTokens = 1 << 16

// verifiedTokens remembers tokens whose signature was verified, by their
// exact text, with the claims that bound them in time. Only a token equal
// byte for byte to one verified with this service's secret is a hit, and a
// hit is still checked against exp and nbf.
type verifiedTokens struct {
	mu sync.RWMutex
	m  map[string]verifiedToken
}

type verifiedToken struct {
	user     string
	exp, nbf int64 // unix seconds; 0: none
}

func (v *verifiedTokens) get(token string) (verifiedToken, bool) {
	v.mu.RLock()
	t, ok := v.m[token]
	v.mu.RUnlock()
	return t, ok
}

func (v *verifiedTokens) put(token string, t verifiedToken) {
	v.mu.Lock()
	if len(v.m) >= maxVerifiedTokens {
		clear(v.m) // rare: start over rather than track recency
	}
	v.m[token] = t
	v.mu.Unlock()
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// isAdmin compares in constant time (hashes, so the length leaks nothing).
func (a *auth) isAdmin(token string) bool {
	got := sha256.Sum256([]byte(token))
	return token != "" && subtle.ConstantTimeCompare(got[:], a.adminHash[:]) == 1
}

// userOf returns the user a buyer's token names; exp is honoured when present.
func (a *auth) userOf(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	now := a.now().Unix()
	if t, ok := a.verified.get(token); ok {
		// The same checks the parser makes of exp and nbf (jwt/v5 has no leeway by default).
		if (t.exp != 0 && now >= t.exp) || (t.nbf != 0 && now < t.nbf) {
			return "", false
		}
		return t.user, true
	}
	var claims jwt.RegisteredClaims
	t, err := a.parser.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return a.secret, nil })
	if err != nil || !t.Valid || !inventory.ValidID(claims.Subject) {
		return "", false
	}
	v := verifiedToken{user: claims.Subject}
	if claims.ExpiresAt != nil {
		v.exp = claims.ExpiresAt.Unix()
	}
	if claims.NotBefore != nil {
		v.nbf = claims.NotBefore.Unix()
	}
	a.verified.put(token, v)
	return claims.Subject, true
}

// caller is who made a request: a buyer, an operator, or nobody.
type caller struct {
	user  string
	admin bool
}

// buyer requires a buyer's token.
func (a *auth) buyer(r *http.Request) (string, error) {
	if user, ok := a.userOf(bearer(r)); ok {
		return user, nil
	}
	return "", errUnauthenticated
}

// operator requires the admin token: a buyer's token is 403, anything else 401.
func (a *auth) operator(r *http.Request) error {
	tok := bearer(r)
	switch {
	case a.isAdmin(tok):
		return nil
	case tok != "":
		if _, ok := a.userOf(tok); ok {
			return errForbidden
		}
	}
	return errUnauthenticated
}

// buyerOrOperator accepts either.
func (a *auth) buyerOrOperator(r *http.Request) (caller, error) {
	tok := bearer(r)
	if a.isAdmin(tok) {
		return caller{admin: true}, nil
	}
	if user, ok := a.userOf(tok); ok {
		return caller{user: user}, nil
	}
	return caller{}, errUnauthenticated
}

// SignUser returns an HS256 token for user, as a client of the API would
// be given by its identity provider (used by the demo and the tests).
func SignUser(secret, user string, claims jwt.MapClaims) (string, error) {
	c := jwt.MapClaims{"sub": user}
	for k, v := range claims {
		c[k] = v
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
}
