package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/seckill/seckill/internal/inventory"
)

// hs256 verifies buyers' tokens: compact JWS (RFC 7515) signed with HMAC
// SHA-256 under the service's secret, claims as in RFC 7519. It is made for
// the buy path, where every request carries a token: no reflection, no
// maps, one allocation (the user id) for a good token.
//
// It is stricter than a general JWT library, on purpose:
//   - alg must be exactly "HS256" ("none", HS384, RS256... are refused), and
//     a "crit" header, naming extensions nobody here understands, is refused;
//   - every segment is canonical base64url without padding (no '=', no
//     CR/LF, no stray bits in the last character), so one signature has
//     one spelling;
//   - header and claims are one JSON object each, with no repeated key,
//     and no key that differs from a registered claim's name only in case
//     (a library that matches names in any case would read it as that
//     claim: two readers must never see two users in one token);
//   - sub is a string without escapes that is a valid user id; exp, nbf
//     and iat are JSON numbers (not null), iss and jti strings, aud a
//     string or an array of strings (or null), as the registered claims'
//     types require;
//   - every number, in the header and the claims, is one a float64 holds
//     (the library reads them so, and refuses a token otherwise).
//
// exp is honoured (the token is refused from its second on), nbf too (it
// is refused before its second), with no leeway: what the jwt library the
// service used before does by default. iat is not checked, as before.
type hs256 struct {
	secret  []byte
	scratch sync.Pool // *jwtScratch
}

// maxTokenLen bounds a token: a buyer's is about 200 bytes.
const maxTokenLen = 4 << 10

// jwtScratch is one verification's memory, reused through the pool.
type jwtScratch struct {
	mac hash.Hash
	tok []byte // the token's bytes
	seg []byte // a decoded segment
	sum [sha256.Size]byte
	sig [sha256.Size]byte
}

// jwtClaims is what a verified token says.
type jwtClaims struct {
	sub      string
	exp, nbf int64 // unix seconds
	hasExp   bool
	hasNbf   bool
}

// The reasons a token is refused (all of them answer 401). Static, so a
// refusal allocates nothing.
var (
	errJWTMalformed = errors.New("jwt: malformed")
	errJWTAlg       = errors.New("jwt: alg is not HS256")
	errJWTSignature = errors.New("jwt: signature does not match")
	errJWTClaims    = errors.New("jwt: bad claims")
	errJWTSubject   = errors.New("jwt: sub is not a valid user id")
	errJWTExpired   = errors.New("jwt: expired")
	errJWTNotYet    = errors.New("jwt: not valid yet")
)

// b64 is strict base64url without padding. Strict refuses stray bits in
// the last character; CR and LF, which it would skip, never get that far
// (tokenAlphabet).
var b64 = base64.RawURLEncoding.Strict()

// tokenAlphabet: the bytes a compact JWS may hold.
var tokenAlphabet = func() (t [256]bool) {
	for _, r := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_." {
		t[r] = true
	}
	return t
}()

func newHS256(secret []byte) *hs256 {
	v := &hs256{secret: secret}
	v.scratch.New = func() any { return &jwtScratch{mac: hmac.New(sha256.New, v.secret)} }
	return v
}

// verify checks token at now (unix seconds) and returns its claims.
func (v *hs256) verify(token string, now int64) (jwtClaims, error) {
	if len(token) > maxTokenLen {
		return jwtClaims{}, errJWTMalformed
	}
	for i := 0; i < len(token); i++ {
		if !tokenAlphabet[token[i]] {
			return jwtClaims{}, errJWTMalformed
		}
	}
	d1 := strings.IndexByte(token, '.')
	if d1 < 0 {
		return jwtClaims{}, errJWTMalformed
	}
	d2 := strings.IndexByte(token[d1+1:], '.')
	if d2 < 0 {
		return jwtClaims{}, errJWTMalformed
	}
	d2 += d1 + 1
	if strings.IndexByte(token[d2+1:], '.') >= 0 || len(token)-d2-1 != b64.EncodedLen(sha256.Size) {
		return jwtClaims{}, errJWTMalformed
	}
	sc := v.scratch.Get().(*jwtScratch)
	defer v.scratch.Put(sc)
	sc.tok = append(sc.tok[:0], token...)
	tok := sc.tok

	// The header, then the signature: no claim of a token is read before
	// its signature is known to be the secret's.
	hdr, err := sc.decode(tok[:d1])
	if err != nil {
		return jwtClaims{}, err
	}
	if err := checkHeader(hdr); err != nil {
		return jwtClaims{}, err
	}
	// The signature, before the claims are read.
	if n, err := b64.Decode(sc.sig[:], tok[d2+1:]); err != nil || n != sha256.Size {
		return jwtClaims{}, errJWTMalformed
	}
	sc.mac.Reset()
	sc.mac.Write(tok[:d2])
	if !hmac.Equal(sc.mac.Sum(sc.sum[:0]), sc.sig[:]) {
		return jwtClaims{}, errJWTSignature
	}
	payload, err := sc.decode(tok[d1+1 : d2])
	if err != nil {
		return jwtClaims{}, err
	}
	c, err := parseClaims(payload)
	if err != nil {
		return jwtClaims{}, err
	}
	if c.hasExp && now >= c.exp {
		return jwtClaims{}, errJWTExpired
	}
	if c.hasNbf && now < c.nbf {
		return jwtClaims{}, errJWTNotYet
	}
	return c, nil
}

// decode decodes one segment into the scratch's segment buffer.
func (sc *jwtScratch) decode(src []byte) ([]byte, error) {
	n := b64.DecodedLen(len(src))
	if cap(sc.seg) < n {
		sc.seg = make([]byte, n)
	}
	n, err := b64.Decode(sc.seg[:n], src)
	if err != nil {
		return nil, errJWTMalformed
	}
	return sc.seg[:n], nil
}

// checkHeader requires alg "HS256" and no crit.
func checkHeader(b []byte) error {
	alg := false
	err := eachMember(b, func(key []byte, val jsonValue) error {
		switch string(key) {
		case "alg":
			if val.kind != jsonString || val.escaped || string(val.text) != "HS256" {
				return errJWTAlg
			}
			alg = true
		case "crit":
			return errJWTMalformed
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !alg {
		return errJWTAlg
	}
	return nil
}

// registeredClaims are RFC 7519's names; a key equal to one of them but
// for case is refused (see hs256).
var registeredClaims = [...]string{"sub", "exp", "nbf", "iat", "iss", "aud", "jti"}

// foldsToRegistered: key is a registered claim's name in other case, or
// holds a byte beyond ASCII (encoding/json folds some of those, the long s
// and the Kelvin sign, to ASCII letters).
func foldsToRegistered(key []byte) bool {
	for _, c := range key {
		if c >= 0x80 {
			return true
		}
	}
	for _, r := range registeredClaims {
		if len(key) != len(r) || string(key) == r {
			continue
		}
		same := true
		for i := range len(r) {
			if key[i]|0x20 != r[i] { // r is lower case letters
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	return false
}

func parseClaims(b []byte) (jwtClaims, error) {
	var c jwtClaims
	var sub []byte
	err := eachMember(b, func(key []byte, val jsonValue) error {
		if foldsToRegistered(key) {
			return errJWTClaims
		}
		var err error
		switch string(key) {
		case "sub":
			if val.kind != jsonString || val.escaped {
				return errJWTSubject
			}
			sub = val.text
		case "exp":
			c.exp, c.hasExp, err = numericDate(val)
		case "nbf":
			c.nbf, c.hasNbf, err = numericDate(val)
		case "iat":
			_, _, err = numericDate(val)
		case "iss", "jti":
			if val.kind != jsonString && val.kind != jsonNull {
				err = errJWTClaims
			}
		case "aud":
			if val.kind != jsonString && val.kind != jsonNull && !(val.kind == jsonArray && val.strings) {
				err = errJWTClaims
			}
		}
		return err
	})
	if err != nil {
		return jwtClaims{}, err
	}
	if !inventory.ValidID(sub) {
		return jwtClaims{}, errJWTSubject
	}
	c.sub = string(sub)
	return c, nil
}

// numericDate reads exp, nbf or iat: a JSON number of seconds (a fraction
// is cut to the second below, as the jwt library does). null is refused:
// the library reads it as no date into its registered claims, and as a
// claim of the wrong type into a map.
func numericDate(val jsonValue) (int64, bool, error) {
	if val.kind != jsonNumber {
		return 0, false, errJWTClaims
	}
	if n, ok := smallInt(val.text); ok {
		return n, true, nil
	}
	f, err := strconv.ParseFloat(string(val.text), 64)
	// Beyond 2^53 seconds (285 million years) a float has no exact second.
	if err != nil || math.Abs(f) > 1<<53 {
		return 0, false, errJWTClaims
	}
	return int64(math.Floor(f)), true, nil
}

// smallInt parses an optional minus and at most 18 digits.
func smallInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
