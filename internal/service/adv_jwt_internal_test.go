package service

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestAdvHS256Refuses: tokens an attacker can make, or a careless issuer
// could sign, that the verifier must refuse. Each one signed with the
// service's secret unless said otherwise, so only the verifier's reading
// stands between it and a 200.
func TestAdvHS256Refuses(t *testing.T) {
	const now = 1_800_000_000
	v := newHS256([]byte(testJWTSecret))
	sign := func(h, c string) string { return rawToken(testJWTSecret, h, c) }
	ok := `{"sub":"alice","exp":1800000060}`
	enc := base64.RawURLEncoding.EncodeToString
	good := sign(hs256Header, ok)
	p := strings.Split(good, ".")
	urlChars := sign(hs256Header, `{"sub":"alice","x":"~~~???"}`)
	if !strings.ContainsAny(urlChars, "-_") {
		t.Fatal("no - or _ in the token")
	}
	deep := strings.Repeat(`{"a":`, 20) + `1` + strings.Repeat(`}`, 20)
	cases := map[string]string{
		"alg none":              sign(`{"alg":"none"}`, ok),
		"alg none unsigned":     enc([]byte(`{"alg":"none"}`)) + "." + p[1] + ".",
		"alg HS256 space":       sign(`{"alg":"HS256 "}`, ok),
		"alg lower":             sign(`{"alg":"hs256"}`, ok),
		"alg escaped":           sign(`{"alg":"HS\u0032\u0035\u0036"}`, ok),
		"alg array":             sign(`{"alg":["HS256"]}`, ok),
		"alg object":            sign(`{"alg":{"HS256":1}}`, ok),
		"alg missing":           sign(`{"typ":"JWT"}`, ok),
		"alg twice":             sign(`{"alg":"HS256","alg":"none"}`, ok),
		"alg twice 2":           sign(`{"alg":"none","alg":"HS256"}`, ok),
		"alg HS384":             sign(`{"alg":"HS384"}`, ok),
		"alg RS256":             sign(`{"alg":"RS256"}`, ok),
		"crit":                  sign(`{"alg":"HS256","crit":["b64"],"b64":false}`, ok),
		"header not object":     sign(`["HS256"]`, ok),
		"header BOM":            sign("\ufeff"+hs256Header, ok),
		"payload array":         sign(hs256Header, `["alice"]`),
		"payload string":        sign(hs256Header, `"alice"`),
		"payload two objects":   sign(hs256Header, ok+ok),
		"payload BOM":           sign(hs256Header, "\ufeff"+ok),
		"payload comment":       sign(hs256Header, `{"sub":"alice" /* x */}`),
		"payload trailing ,":    sign(hs256Header, `{"sub":"alice",}`),
		"payload NaN exp":       sign(hs256Header, `{"sub":"alice","exp":NaN}`),
		"payload Infinity":      sign(hs256Header, `{"sub":"alice","exp":Infinity}`),
		"payload single quotes": sign(hs256Header, `{'sub':'alice'}`),
		"payload deep":          sign(hs256Header, `{"sub":"alice","x":`+deep+`}`),
		"payload unclosed":      sign(hs256Header, `{"sub":"alice"`),
		"sub escaped":           sign(hs256Header, `{"sub":"\u0061lice"}`),
		"sub escaped key":       sign(hs256Header, `{"\u0073ub":"alice"}`),
		"sub twice":             sign(hs256Header, `{"sub":"alice","sub":"bob"}`),
		"sub SUB":               sign(hs256Header, `{"sub":"alice","SUB":"bob"}`),
		"sub Sub only":          sign(hs256Header, `{"Sub":"bob"}`),
		"sub kelvin-ish":        sign(hs256Header, "{\"s\u017fb\":\"bob\"}"),
		"sub empty":             sign(hs256Header, `{"sub":""}`),
		"sub too long":          sign(hs256Header, `{"sub":"`+strings.Repeat("a", 65)+`"}`),
		"sub slash":             sign(hs256Header, `{"sub":"a/b"}`),
		"sub space":             sign(hs256Header, `{"sub":"a b"}`),
		"sub unicode":           sign(hs256Header, `{"sub":"ålice"}`),
		"sub number":            sign(hs256Header, `{"sub":42}`),
		"sub null":              sign(hs256Header, `{"sub":null}`),
		"sub array":             sign(hs256Header, `{"sub":["alice"]}`),
		"sub object":            sign(hs256Header, `{"sub":{"id":"alice"}}`),
		"sub missing":           sign(hs256Header, `{"exp":1800000060}`),
		"sub nested only":       sign(hs256Header, `{"x":{"sub":"alice"}}`),
		"exp past":              sign(hs256Header, `{"sub":"alice","exp":1799999999}`),
		"exp now":               sign(hs256Header, `{"sub":"alice","exp":1800000000}`),
		"exp float now":         sign(hs256Header, `{"sub":"alice","exp":1800000000.9}`),
		"exp exponent past":     sign(hs256Header, `{"sub":"alice","exp":1.7e9}`),
		"exp negative":          sign(hs256Header, `{"sub":"alice","exp":-1}`),
		"exp negative huge":     sign(hs256Header, `{"sub":"alice","exp":-99999999999999999999}`),
		"exp huge":              sign(hs256Header, `{"sub":"alice","exp":1e400}`),
		"exp 2^63":              sign(hs256Header, `{"sub":"alice","exp":9223372036854775808}`),
		"exp string":            sign(hs256Header, `{"sub":"alice","exp":"1900000000"}`),
		"exp bool":              sign(hs256Header, `{"sub":"alice","exp":true}`),
		"exp twice":             sign(hs256Header, `{"sub":"alice","exp":1900000000,"exp":1}`),
		"exp twice 2":           sign(hs256Header, `{"sub":"alice","exp":1,"exp":1900000000}`),
		"exp EXP":               sign(hs256Header, `{"sub":"alice","exp":1,"EXP":1900000000}`),
		"exp leading zero":      sign(hs256Header, `{"sub":"alice","exp":01900000000}`),
		"exp plus":              sign(hs256Header, `{"sub":"alice","exp":+1900000000}`),
		"nbf future":            sign(hs256Header, `{"sub":"alice","nbf":1800000001}`),
		"nbf future float":      sign(hs256Header, `{"sub":"alice","nbf":1800000001.5e0}`),
		"nbf string":            sign(hs256Header, `{"sub":"alice","nbf":"0"}`),
		"iat string":            sign(hs256Header, `{"sub":"alice","iat":"x"}`),
		"aud number":            sign(hs256Header, `{"sub":"alice","aud":1}`),
		"wrong secret":          rawToken("other", hs256Header, ok),
		"empty secret":          rawToken("", hs256Header, ok),
		"padded sig":            good + "=",
		"padded payload":        p[0] + "." + p[1] + "=." + p[2],
		"std alphabet":          strings.NewReplacer("-", "+", "_", "/").Replace(urlChars),
		"payload swapped":       p[0] + "." + enc([]byte(`{"sub":"bob"}`)) + "." + p[2],
		"split moved":           p[0] + p[1][:2] + "." + p[1][2:] + "." + p[2],
		"four parts":            good + ".x",
		"two parts":             p[0] + "." + p[1],
		"trailing bits sig":     p[0] + "." + p[1] + "." + flipLastBits(p[2]),
		"space":                 " " + good,
		"newline":               good + "\n",
		"huge":                  sign(hs256Header, `{"sub":"alice","x":"`+strings.Repeat("a", 8<<10)+`"}`),
		"empty":                 "",
		"dots":                  "..",
	}
	if c, err := v.verify(good, now); err != nil || c.sub != "alice" {
		t.Fatalf("the good token: %+v %v", c, err)
	}
	for name, tok := range cases {
		if c, err := v.verify(tok, now); err == nil {
			t.Errorf("%s: accepted as %q (%s)", name, c.sub, tok)
		}
	}
}
