package service

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/inventory"
)

const testJWTSecret = "jwt-secret-for-tests"

// rawToken signs header and claims, given as JSON text, exactly as they are.
func rawToken(secret, header, claims string) string {
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(m.Sum(nil))
}

// libraryUser is what the jwt library says of token at now, read both
// ways it reads claims: into its registered claims (the parser, options
// and checks of the service's old auth.userOf) and into a map (its
// default, jwt.Parse, which reads every number as a float64 and requires
// exp and nbf to be numbers when present). A token is the library's only
// if both readings accept it and name the same valid user: the verifier
// must refuse whatever either refuses.
func libraryUser(token string, now int64) (string, bool) {
	p := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithTimeFunc(func() time.Time { return time.Unix(now, 0) }))
	key := func(*jwt.Token) (any, error) { return []byte(testJWTSecret), nil }
	var claims jwt.RegisteredClaims
	t, err := p.ParseWithClaims(token, &claims, key)
	if err != nil || !t.Valid || !inventory.ValidID(claims.Subject) {
		return "", false
	}
	m, err := p.Parse(token, key)
	if err != nil || !m.Valid {
		return "", false
	}
	if sub, err := m.Claims.GetSubject(); err != nil || sub != claims.Subject {
		return "", false
	}
	return claims.Subject, true
}

const hs256Header = `{"alg":"HS256","typ":"JWT"}`

// TestHS256 lists tokens the verifier must accept and refuse, each with
// what the jwt library said of it: the verifier refuses more (it is
// strict), never accepts what the library refused, and names the same
// user when both accept.
func TestHS256(t *testing.T) {
	const now = 1_800_000_000
	v := newHS256([]byte(testJWTSecret))
	good := rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":1800000060}`)
	parts := strings.Split(good, ".")
	urlChars := rawToken(testJWTSecret, hs256Header, `{"sub":"alice","x":"~~~???"}`) // base64url has - and _
	if !strings.ContainsAny(urlChars[:strings.LastIndexByte(urlChars, '.')], "-_") {
		t.Fatal("the token has no - or _")
	}
	for _, c := range []struct {
		name    string
		token   string
		want    bool // the verifier accepts, as alice
		library bool // the jwt library accepted it
	}{
		{"valid", good, true, true},
		{"no exp", rawToken(testJWTSecret, hs256Header, `{"sub":"alice"}`), true, true},
		{"whitespace and other claims", rawToken(testJWTSecret, " {\n\"typ\" : \"JWT\", \"alg\":\"HS256\",\"kid\":[1,{\"a\":null}]} ",
			`{ "iss":"idp", "aud":["a","b"], "iat":1.7e9, "jti":null, "roles":{"x":[true,false,-0.5e-3]}, "name":"\u00e9\"", "sub":"alice", "nbf":1799999999.5 }`), true, true},
		{"fractional exp", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":1800000000.9}`), false, false},
		{"exp in the next second", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":1800000001.2}`), true, true},
		{"exp null", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":null}`), false, false},
		{"nbf null", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","nbf":null}`), false, false},
		{"iat null", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","iat":null}`), false, true},
		{"iat beyond float64", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","iat":1e400}`), false, false},
		{"nbf beyond float64", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","nbf":-1e400}`), false, false},
		{"header number beyond float64", rawToken(testJWTSecret, `{"alg":"HS256","n":1e400}`, `{"sub":"alice"}`), false, false},
		{"header number beyond float64 nested", rawToken(testJWTSecret, `{"alg":"HS256","kid":[{"x":-2e308}]}`, `{"sub":"alice"}`), false, false},
		{"claim number beyond float64", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","x":{"y":[1E+309]}}`), false, false},
		{"number at float64's edge", rawToken(testJWTSecret, `{"alg":"HS256","n":1.7976931348623157e308}`, `{"sub":"alice","x":-1.7976931348623157e308,"y":1e-400}`), true, true},
		{"long number", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","x":`+strings.Repeat("9", 400)+`}`), false, false},
		{"aud string", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","aud":"x"}`), true, true},
		{"expired", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":1800000000}`), false, false},
		{"nbf ahead", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","nbf":1800000001}`), false, false},
		{"nbf now", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","nbf":1800000000}`), true, true},
		{"another secret", rawToken("other", hs256Header, `{"sub":"alice"}`), false, false},
		{"alg none", rawToken(testJWTSecret, `{"alg":"none"}`, `{"sub":"alice"}`), false, false},
		{"alg none unsigned", parts[0][:0] + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".", false, false},
		{"alg HS384", rawToken(testJWTSecret, `{"alg":"HS384"}`, `{"sub":"alice"}`), false, false},
		{"alg RS256", rawToken(testJWTSecret, `{"alg":"RS256"}`, `{"sub":"alice"}`), false, false},
		{"alg hs256", rawToken(testJWTSecret, `{"alg":"hs256"}`, `{"sub":"alice"}`), false, false},
		{"no alg", rawToken(testJWTSecret, `{"typ":"JWT"}`, `{"sub":"alice"}`), false, false},
		{"alg escaped", rawToken(testJWTSecret, `{"alg":"HS\u0032\u0035\u0036"}`, `{"sub":"alice"}`), false, true},
		{"alg repeated", rawToken(testJWTSecret, `{"alg":"none","alg":"HS256"}`, `{"sub":"alice"}`), false, true},
		{"crit", rawToken(testJWTSecret, `{"alg":"HS256","crit":["b64"],"b64":false}`, `{"sub":"alice"}`), false, true},
		{"header not an object", rawToken(testJWTSecret, `["HS256"]`, `{"sub":"alice"}`), false, false},
		{"claims not an object", rawToken(testJWTSecret, hs256Header, `["alice"]`), false, false},
		{"claims with trailing text", rawToken(testJWTSecret, hs256Header, `{"sub":"alice"} x`), false, false},
		{"claims with two objects", rawToken(testJWTSecret, hs256Header, `{"sub":"alice"}{}`), false, false},
		{"no sub", rawToken(testJWTSecret, hs256Header, `{"name":"alice"}`), false, false},
		{"sub not an id", rawToken(testJWTSecret, hs256Header, `{"sub":"al ice"}`), false, false},
		{"sub too long", rawToken(testJWTSecret, hs256Header, `{"sub":"`+strings.Repeat("a", 65)+`"}`), false, false},
		{"sub a number", rawToken(testJWTSecret, hs256Header, `{"sub":7}`), false, false},
		{"sub escaped", rawToken(testJWTSecret, hs256Header, `{"sub":"\u0061lice"}`), false, true},
		{"sub repeated", rawToken(testJWTSecret, hs256Header, `{"sub":"mallory","sub":"alice"}`), false, true},
		{"sub in other case", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","SUB":"mallory"}`), false, false /* two readings, two users */},
		{"sub with a long s", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","ſub":"mallory"}`), false, false /* two readings, two users */},
		{"exp a string", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":"1800000060"}`), false, false},
		{"exp an object", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":{}}`), false, false},
		{"exp huge", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","exp":1e300}`), false, false},
		{"iat a word", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","iat":"yesterday"}`), false, false},
		{"iss a number", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","iss":1}`), false, false},
		{"aud of numbers", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","aud":[1]}`), false, false},
		{"invalid JSON", rawToken(testJWTSecret, hs256Header, `{"sub":"alice",}`), false, false},
		{"too deep", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","x":`+strings.Repeat("[", 20)+strings.Repeat("]", 20)+`}`), false, true},
		{"two parts", parts[0] + "." + parts[1], false, false},
		{"four parts", good + ".x", false, false},
		{"empty", "", false, false},
		{"padded signature", good + "=", false, false},
		{"stray bits in the signature", parts[0] + "." + parts[1] + "." + flipLastBits(parts[2]), false, true},
		{"newline in the claims", parts[0] + "." + parts[1][:4] + "\n" + parts[1][4:] + "." + parts[2], false, false},
		{"standard base64", strings.ReplaceAll(strings.ReplaceAll(urlChars, "-", "+"), "_", "/"), false, false},
		{"url base64", urlChars, true, true},
		{"signature cut", good[:len(good)-1], false, false},
		{"huge", rawToken(testJWTSecret, hs256Header, `{"sub":"alice","pad":"`+strings.Repeat("x", maxTokenLen)+`"}`), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib, libOK := libraryUser(c.token, now)
			if libOK != c.library {
				t.Fatalf("the jwt library says %q, %v: the case is wrong", lib, libOK)
			}
			got, err := v.verify(c.token, now)
			if (err == nil) != c.want || err == nil && got.sub != "alice" {
				t.Fatalf("verify = %+v, %v; want accepted=%v", got, err, c.want)
			}
			if err == nil && (!libOK || lib != got.sub) {
				t.Fatalf("verify accepts %q as %q, the jwt library says %q, %v", c.token, got.sub, lib, libOK)
			}
		})
	}
}

// flipLastBits changes the unused low bits of a segment's last character:
// a decoder that ignores them reads the same bytes.
func flipLastBits(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, seg[len(seg)-1])
	return seg[:len(seg)-1] + string(alphabet[i^1])
}

// canonical says whether the jwt library and the verifier must agree on
// a token made of header and claims: both are JSON objects that
// encoding/json reads, spelled as json.Marshal spells them (no repeated
// key, no escapes but in strings), with ASCII keys, none a registered
// claim's name in other case; alg is "HS256" and there is no crit; exp,
// nbf and iat are numbers of at most 2^53 (not null); nested no deeper
// than the verifier reads.
func canonical(header, claims map[string]any) bool {
	if header["alg"] != "HS256" || header["crit"] != nil || len(header) > maxJSONMembers || len(claims) > maxJSONMembers {
		return false
	}
	if _, has := header["crit"]; has {
		return false
	}
	for k, v := range claims {
		if foldsToRegistered([]byte(k)) || strings.ContainsAny(k, "\"\\<>&") || strings.IndexFunc(k, func(r rune) bool { return r < 0x20 }) >= 0 {
			return false
		}
		switch k {
		case "exp", "nbf", "iat":
			if f, ok := v.(float64); !ok || math.Abs(f) > 1<<53 {
				return false
			}
		}
		if depth(v) > maxJSONDepth-2 || !smallObjects(v) {
			return false
		}
	}
	for k := range header {
		if strings.ContainsAny(k, "\"\\<>&") || strings.IndexFunc(k, func(r rune) bool { return r < 0x20 }) >= 0 {
			return false
		}
	}
	return true
}

func depth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	}
	return 0
}

// smallObjects: no nested object has more keys than the verifier reads,
// nor a key json.Marshal escapes.
func smallObjects(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if len(v) > maxJSONMembers {
			return false
		}
		for k, e := range v {
			if strings.ContainsAny(k, "\"\\<>&") || strings.IndexFunc(k, func(r rune) bool { return r < 0x20 || r >= 0x7f }) >= 0 || !smallObjects(e) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !smallObjects(e) {
				return false
			}
		}
	}
	return true
}

// marshal spells v as json.Marshal does, but for <, > and &.
func marshal(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// FuzzHS256 differential-tests the verifier against the jwt library on
// tokens signed with the secret from any header and claims text, at any
// time: the verifier never accepts what the library refuses and names the
// same user when both accept; and on the same header and claims spelled
// canonically (see canonical) the two agree exactly. Any token string at
// all is also tried as given.
//
//	go test -run '^$' -fuzz FuzzHS256 -fuzztime 1m ./service/
func FuzzHS256(f *testing.F) {
	for _, s := range []struct{ header, claims string }{
		{hs256Header, `{"sub":"alice","exp":1800000060}`},
		{`{"alg":"HS256"}`, `{"sub":"u.1:x-y_z","nbf":1799999999,"iat":1700000000,"aud":["a"],"iss":"i","jti":"j"}`},
		{`{"alg":"none"}`, `{"sub":"alice"}`},
		{`{"alg":"HS256","alg":"HS256"}`, `{"sub":"alice","Sub":"bob"}`},
		{`{"alg":"HS256","crit":[]}`, `{"sub":"alice","exp":"1800000060"}`},
		{` {"alg" : "HS256"} `, ` {"sub" : "alice" , "exp" : 1.8e9 , "x":{"y":[1,"2",null,true]}} `},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":-1e400}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","ſub":"bob","K":"\ud800"}`},
		{`{"alg":"HS256"}`, `{"sub":"\u0061","nbf":null,"exp":null}`},
		{`{"alg":"HS256"}`, `null`},
		// Numbers beyond float64 (the library cannot read them), anywhere;
		// exp, nbf and iat null or beyond any date.
		{`{"alg":"HS256","n":1e400}`, `{"sub":"alice"}`},
		{`{"alg":"HS256","kid":[{"x":-2e308}]}`, `{"sub":"alice"}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","x":{"y":[1E+309]}}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","x":` + strings.Repeat("9", 400) + `}`},
		{`{"alg":"HS256","n":1.7976931348623157e308}`, `{"sub":"alice","x":-1.7976931348623157e308,"y":1e-400}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":null}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","nbf":null}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","iat":null}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","iat":1e400}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":1e400}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","nbf":9.3e18}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":999999999999999999,"iat":-999999999999999999}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","SUB":"mallory"}`},
	} {
		f.Add(s.header, s.claims, int64(1_800_000_000), "")
	}
	f.Add("", "", int64(0), "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.")
	f.Add("", "", int64(0), "a.b.c")
	v := newHS256([]byte(testJWTSecret))
	check := func(t *testing.T, token string, now int64) (string, bool) {
		t.Helper()
		lib, libOK := libraryUser(token, now)
		got, err := v.verify(token, now)
		if err == nil && (!libOK || got.sub != lib) {
			t.Fatalf("verify accepts %q at %d as %q; the jwt library says %q, %v", token, now, got.sub, lib, libOK)
		}
		if err == nil && !inventory.ValidID(got.sub) {
			t.Fatalf("verify accepts sub %q", got.sub)
		}
		return lib, libOK && err != nil
	}
	f.Fuzz(func(t *testing.T, header, claims string, now int64, token string) {
		if len(token) > 0 {
			check(t, token, now)
		}
		check(t, rawToken(testJWTSecret, header, claims), now)
		var h, c map[string]any
		if json.Unmarshal([]byte(header), &h) != nil || json.Unmarshal([]byte(claims), &c) != nil || !canonical(h, c) {
			return
		}
		tok := rawToken(testJWTSecret, marshal(h), marshal(c))
		if len(tok) > maxTokenLen {
			return
		}
		if lib, missed := check(t, tok, now); missed {
			t.Fatalf("verify refuses %q at %d; the jwt library accepts it as %q", tok, now, lib)
		}
	})
}

// BenchmarkJWTLibrary is the old path, for comparison with BenchmarkUserOf.
func BenchmarkJWTLibrary(b *testing.B) {
	now := time.Now().Unix()
	tok := rawToken(testJWTSecret, hs256Header, `{"exp":`+itoa(int(now)+3600)+`,"sub":"alice"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := libraryUser(tok, now); !ok {
			b.Fatal("refused")
		}
	}
}
