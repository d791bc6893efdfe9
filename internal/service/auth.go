package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// auth checks the two kinds of bearer token: buyers' HS256 JWTs (the user
// id is the "sub" claim) and the operators' admin token.
//
// Buyers' tokens are verified on every request, with no cache of verified
// ones: hs256 costs about as much as a lookup in a shared map did, and a
// cache held every buyer's token (9 MB under 2M buyers, all of it scanned
// by every garbage collection).
type auth struct {
	jwt       *hs256
	adminHash [sha256.Size]byte
	now       func() time.Time
}

func newAuth(jwtSecret, adminToken string) *auth {
	return &auth{
		jwt:       newHS256([]byte(jwtSecret)),
		adminHash: sha256.Sum256([]byte(adminToken)),
		now:       time.Now,
	}
}

func bearer(r *http.Request) string { return bearerOf(r.Header.Get("Authorization")) }

// bearerOf is the token of an Authorization header's value.
func bearerOf(h string) string {
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

// userOf returns the user a buyer's token names; exp and nbf are honoured
// when present.
func (a *auth) userOf(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	c, err := a.jwt.verify(token, a.now().Unix())
	if err != nil {
		return "", false
	}
	return c.sub, true
}

// caller is who made a request: a buyer, an operator, or nobody.
type caller struct {
	user  string
	admin bool
}

// buyer requires a buyer's token.
func (a *auth) buyer(r *http.Request) (string, error) {
	return a.buyerOf(r.Header.Get("Authorization"))
}

// buyerOf is buyer of an Authorization header's value.
func (a *auth) buyerOf(authorization string) (string, error) {
	if user, ok := a.userOf(bearerOf(authorization)); ok {
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
