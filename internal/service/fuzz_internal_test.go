package service

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/store"
)

// Fuzz tests of the service's parsers of what clients send: JSON bodies,
// bearer tokens, purchase tokens, client addresses, request ids, and of
// the configuration (rate limits, trusted proxies, the Redis URL).

// mustBadRequest fails unless err is the contract's 400 invalid_argument.
func mustBadRequest(t *testing.T, what string, err error) {
	t.Helper()
	var api *apiError
	if !errors.As(err, &api) || api.Status != http.StatusBadRequest || api.Code != "invalid_argument" || api.Message == "" {
		t.Fatalf("%s: refused with %#v, want a 400 invalid_argument", what, err)
	}
}

// jsonKeys walks one JSON value and calls key with the path of every
// object key it holds ("items[].sku" for a key inside an array); it
// reports duplicate keys of one object as "dup:" + path.
func jsonKeys(dec *json.Decoder, path string, key func(string)) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			name := path + k.(string)
			if seen[name] {
				key("dup:" + name)
			}
			seen[name] = true
			key(name)
			if err := jsonKeys(dec, name+".", key); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if err := jsonKeys(dec, strings.TrimSuffix(path, ".")+"[].", key); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}

// createSaleFields are the keys the contract defines for POST /v1/admin/sales.
var createSaleFields = map[string]bool{
	"id": true, "per_user_limit": true, "starts_at": true, "ends_at": true, "require_purchase_token": true,
	"rate_limits": true, "rate_limits.per_user": true, "rate_limits.per_ip": true, "rate_limits.per_sale": true,
	"items": true, "items[].sku": true, "items[].stock": true,
}

// FuzzCreateSaleBody: decode reads a create-sale body strictly: anything it
// refuses is a 400 invalid_argument; anything it accepts is at most 64 KiB
// of one valid JSON value whose every key, at every depth, is a field of
// the contract spelled exactly so, once; it decodes the same once written
// back. A sale made of it (createSaleRequest.sale) passes the engine's
// validation and carries rate limits the service can parse; a refused one
// is a 400 or an inventory.InvalidError.
func FuzzCreateSaleBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"launch","per_user_limit":1,"items":[{"sku":"phone","stock":100}]}`,
		`{"id":"s1","per_user_limit":2,"starts_at":"2026-11-21T12:00:00Z","ends_at":"2026-11-21T13:00:00+01:00",` +
			`"require_purchase_token":true,"rate_limits":{"per_user":"5/s,burst=10","per_ip":"off","per_sale":"2000/s"},` +
			`"items":[{"sku":"A","stock":-1},{"sku":"B","stock":0}]}`,
		`{"id":"s1","items":[{"sku":"A","stock":1}]} `,
		`{"id":"s1","items":[{"sku":"A","stock":1}]}{}`,
		`{"id":"s1","items":[{"sku":"A","stock":1.5}]}`,
		`{"id":"s1","items":[{"sku":"A","stock":1}],"colour":"red"}`,
		`{"id":"s1","rate_limits":{"per_user":"5/day"},"items":[{"sku":"A","stock":1}]}`,
		`{"id":"s1","per_user_limit":0,"items":[{"sku":"A","stock":1}]}`,
		`{"id":"s 1","items":[{"sku":"A","stock":1000000001}]}`,
		`{"id":"s1","starts_at":"tomorrow","items":[]}`,
		`[]`, `null`, `"x"`, ``, `{`, `{"id":"` + strings.Repeat("x", 70<<10) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createSaleRequest
		err := decode(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/admin/sales", bytes.NewReader(body)), &req)
		if err != nil {
			mustBadRequest(t, "decode", err)
			return
		}
		if len(body) > maxBody || !json.Valid(body) {
			t.Fatalf("accepted %d bytes that are not one valid JSON value of at most 64 KiB", len(body))
		}
		if err := jsonKeys(json.NewDecoder(bytes.NewReader(body)), "", func(k string) {
			if !createSaleFields[k] {
				t.Fatalf("accepted a body with the key %q: not a field of the contract (or a repeated one)", k)
			}
		}); err != nil {
			t.Fatalf("accepted a body the tokenizer refuses: %v", err)
		}
		again, _ := json.Marshal(req)
		var back createSaleRequest
		if err := json.Unmarshal(again, &back); err != nil || !reflect.DeepEqual(req, back) {
			t.Fatalf("written back as %s, decodes as %+v, %v; was %+v", again, back, err, req)
		}

		sale, err := req.sale()
		if err != nil {
			var inv *inventory.InvalidError
			if !errors.As(err, &inv) {
				mustBadRequest(t, "sale", err)
			}
			return
		}
		if err := inventory.ValidateSale(sale.Sale); err != nil {
			t.Fatalf("sale %+v accepted, but the engine refuses it: %v", sale, err)
		}
		if sale.PerUserLimit < 1 {
			t.Fatalf("per-user limit %d accepted", sale.PerUserLimit)
		}
		for _, spec := range []string{sale.RateLimits.PerUser, sale.RateLimits.PerIP, sale.RateLimits.PerSale} {
			if _, err := parseLimitSpec(spec); spec != "" && err != nil {
				t.Fatalf("rate limit %q accepted, but resolve cannot parse it: %v", spec, err)
			}
		}
		for _, tm := range []time.Time{sale.StartsAt, sale.EndsAt} {
			if tm.Location() != time.UTC {
				t.Fatalf("time %v is not in UTC", tm)
			}
		}
		if len(sale.Items) != len(req.Items) {
			t.Fatalf("%d items in, %d out", len(req.Items), len(sale.Items))
		}
	})
}

// FuzzSaleRateLimits: a sale's own rate limits are accepted exactly when
// each is empty, "off" or a spec ratelimit.ParseLimit takes; resolve then
// gives each scope the parsed limit, nil for "off", and the service's own
// limit for an empty one.
func FuzzSaleRateLimits(f *testing.F) {
	f.Add("5/s,burst=10", "off", "")
	f.Add("", "", "2000/s")
	f.Add("5/day", "x", "-1/s")
	f.Add("off ", "OFF", "100/m,alg=sliding-window")
	f.Fuzz(func(t *testing.T, perUser, perIP, perSale string) {
		rl := RateLimits{PerUser: perUser, PerIP: perIP, PerSale: perSale}
		err := checkSaleLimits(rl)
		valid := func(spec string) bool {
			_, perr := ratelimit.ParseLimit(spec)
			return spec == "" || spec == rateLimitOff || perr == nil
		}
		if want := valid(perUser) && valid(perIP) && valid(perSale); (err == nil) != want {
			t.Fatalf("checkSaleLimits(%+v) = %v; want accepted=%v", rl, err, want)
		}
		if err != nil {
			mustBadRequest(t, "checkSaleLimits", err)
			return
		}
		def := ratelimit.PerSecond(1, 1)
		s := &Service{limits: limits{user: &def, ip: &def, sale: &def}}
		got := s.resolve(store.Sale{}, SaleSettings{RateLimits: rl})
		for _, c := range []struct {
			spec string
			got  *ratelimit.Limit
		}{{perUser, got.user}, {perIP, got.ip}, {perSale, got.sale}} {
			var want *ratelimit.Limit
			switch c.spec {
			case "":
				want = &def
			case rateLimitOff:
			default:
				l, _ := ratelimit.ParseLimit(c.spec)
				want = &l
			}
			if (want == nil) != (c.got == nil) || want != nil && *want != *c.got {
				t.Fatalf("spec %q resolves to %v, want %v", c.spec, c.got, want)
			}
		}
	})
}

// FuzzBearer: bearer returns the token of "Bearer <token>" (the scheme in
// any case), trimmed, and "" for anything else.
func FuzzBearer(f *testing.F) {
	for _, h := range []string{"Bearer abc.def.ghi", "bearer  tok ", "BEARER x", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "", "Bearerx y"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{h}
		got := bearer(r)
		if got == "" {
			return
		}
		if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") || got != strings.TrimSpace(h[7:]) {
			t.Fatalf("bearer(%q) = %q", h, got)
		}
	})
}

// FuzzUserOf: a buyer's token is accepted only if it is an HS256 JWT whose
// signature the service's secret makes and whose sub is a valid user id;
// any token SignUser makes for a valid user with a future (or no) exp
// names that user; the same claims signed with another secret, or with
// alg none, are refused; and a token changed in one byte names the same
// user or none.
func FuzzUserOf(f *testing.F) {
	const secret = "jwt-secret-for-fuzzing"
	f.Add("", "alice", int64(3600), uint16(0))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.", "u.1", int64(-10), uint16(5))
	f.Add("a.b.c", "bad user", int64(0), uint16(40))
	f.Add("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.x", strings.Repeat("u", 65), int64(1<<40), uint16(9))
	a := newAuth(secret, "admin-token")
	f.Fuzz(func(t *testing.T, token, user string, expIn int64, flip uint16) {
		if sub, ok := a.userOf(token); ok {
			if !inventory.ValidID(sub) {
				t.Fatalf("userOf(%q) accepted sub %q", token, sub)
			}
			parts := strings.Split(token, ".")
			if len(parts) != 3 {
				t.Fatalf("userOf accepted %q, not three parts", token)
			}
			var hdr struct{ Alg string }
			raw, _ := base64.RawURLEncoding.DecodeString(parts[0])
			sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
			m := hmac.New(sha256.New, []byte(secret))
			m.Write([]byte(parts[0] + "." + parts[1]))
			if json.Unmarshal(raw, &hdr) != nil || hdr.Alg != "HS256" || !hmac.Equal(sig, m.Sum(nil)) {
				t.Fatalf("userOf accepted %q: header %s, signature not the secret's", token, raw)
			}
		}

		claims := jwt.MapClaims{}
		if expIn != 0 {
			claims["exp"] = time.Now().Unix() + max(min(expIn, 1<<40), -(1<<40))
		}
		signed, err := SignUser(secret, user, claims)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := a.userOf(signed)
		wantOK := inventory.ValidID(user) && (expIn == 0 || expIn > 5) // a second of slack either side
		if expIn == 0 || expIn > 5 || expIn < -5 {
			if ok != wantOK || ok && got != user {
				t.Fatalf("token for %q exp in %d s: userOf = %q, %v", user, expIn, got, ok)
			}
		}
		if other, _ := SignUser("another secret", user, claims); a.validUser(other) {
			t.Fatalf("a token signed with another secret is accepted")
		}
		none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": user}).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if a.validUser(none) {
			t.Fatalf("an alg none token is accepted")
		}
		if len(signed) > 0 {
			b := []byte(signed)
			i := int(flip) % len(b)
			b[i] ^= byte(1 + (flip>>8)%255)
			if u, ok := a.userOf(string(b)); ok && u != user {
				t.Fatalf("token %q changed at %d names %q, not %q", b, i, u, user)
			}
		}
	})
}

func (a *auth) validUser(token string) bool { _, ok := a.userOf(token); return ok }

// purchaseTokenService is a Service with what purchase tokens need: the
// secret, and Redis (an in-process one) for the single use.
func purchaseTokenService(t testing.TB) (*Service, *miniredis.Miniredis) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return &Service{cfg: Config{JWTSecret: "jwt-secret-for-fuzzing"}, tokenKey: tokenKeyOf("jwt-secret-for-fuzzing"), rdb: rdb, eng: inventory.New(rdb, inventory.Options{})}, m
}

// FuzzPurchaseToken: a token the service signed for a sale and a user is
// accepted once, for that sale and user only, before it expires; anything
// else (any other string, the token changed in one byte, another sale or
// user, expired) is refused with 403 permission_denied and writes nothing
// to Redis.
func FuzzPurchaseToken(f *testing.F) {
	f.Add("s1", "alice", int64(60_000), "", uint16(0))
	f.Add("s1", "bob", int64(-1), "czF8Ym9ifDE3MDB8YWJj.c2ln", uint16(3))
	f.Add("launch.2026", "u-1", int64(1), "not a token", uint16(77))
	f.Add("s1", "alice", int64(300_000), "czF8YWxpY2V8OTk5OTk5OTk5OTk5OXxhYmM.", uint16(12))
	s, m := purchaseTokenService(f)
	ctx := context.Background()
	// use checks a token and spends it, as a buy does.
	use := func(ctx context.Context, sale, user, token string) error {
		pt, err := s.checkPurchaseToken(sale, user, token)
		if err != nil {
			return err
		}
		return spendToken(ctx, s, sale, user, pt)
	}
	denied := func(t *testing.T, what string, err error) {
		t.Helper()
		var api *apiError
		if !errors.As(err, &api) || api.Status != http.StatusForbidden || api.Code != "permission_denied" {
			t.Fatalf("%s: %v, want 403 permission_denied", what, err)
		}
	}
	f.Fuzz(func(t *testing.T, sale, user string, expiresIn int64, token string, flip uint16) {
		if !inventory.ValidID(sale) || !inventory.ValidID(user) {
			return // the buy handler validates both before it looks at a token
		}
		m.FlushAll()
		denied(t, "an arbitrary token", use(ctx, sale, user, token))
		if keys := m.Keys(); len(keys) > 0 {
			t.Fatalf("a refused token wrote %v", keys)
		}

		expiresIn = max(min(expiresIn, 10*60_000), -10*60_000)
		var nonce [16]byte
		copy(nonce[:], token)
		payload := sale + "|" + user + "|" + strconv.FormatInt(time.Now().UnixMilli()+expiresIn, 10) + "|" + hex.EncodeToString(nonce[:])
		signed := s.signToken(payload)
		b := []byte(signed)
		b[int(flip)%len(b)] ^= byte(1 + (flip>>8)%255)
		if string(b) != signed {
			denied(t, "the token changed in one byte", use(ctx, sale, user, string(b)))
		}
		denied(t, "another sale", use(ctx, sale+"x", user, signed))
		denied(t, "another user", use(ctx, sale, user+"x", signed))
		if len(m.Keys()) > 0 {
			t.Fatalf("refused tokens wrote %v", m.Keys())
		}
		err := use(ctx, sale, user, signed)
		switch {
		case expiresIn <= 0:
			denied(t, "an expired token", err)
		case expiresIn > 100: // far enough from now not to expire while the test runs
			if err != nil {
				t.Fatalf("the genuine token is refused: %v", err)
			}
			denied(t, "the token's second use", use(ctx, sale, user, signed))
		}
	})
}

// FuzzClientIP: the client's address is the peer's unless the peer is a
// trusted proxy; then it is the rightmost X-Forwarded-For address that is
// not a trusted proxy, every hop right of it being trusted (or the last
// trusted hop when every one is trusted or the next one is garbage). It
// is always the peer or one of the forwarded addresses, unmapped.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1234", "203.0.113.7", "10.0.0.2", "10.0.0.0/8")
	f.Add("192.0.2.1:80", "198.51.100.1, 10.0.0.3", "", "10.0.0.0/8,192.0.2.1")
	f.Add("[::ffff:10.0.0.1]:443", "garbage, 203.0.113.9", "::1", "10.0.0.0/8,::1")
	f.Add("[fe80::1%eth0]:80", "203.0.113.1", "", "fe80::/10")
	f.Add("not an address", "1.2.3.4", "", "0.0.0.0/0")
	f.Fuzz(func(t *testing.T, remote, xff1, xff2, trusted string) {
		var list []string
		if trusted != "" {
			list = strings.Split(trusted, ",")
		}
		s := &Service{cfg: Config{TrustedProxies: list, RateLimitUser: "off"}}
		if s.parseLimits() != nil {
			return
		}
		r := httptest.NewRequest("POST", "/v1/sales/s1/orders", nil)
		r.RemoteAddr = remote
		r.Header["X-Forwarded-For"] = []string{xff1, xff2}
		got := s.clientIP(r)
		peer, err := netip.ParseAddrPort(remote)
		if err != nil {
			if got.IsValid() {
				t.Fatalf("clientIP = %v from an unparsable peer %q", got, remote)
			}
			return
		}
		if got != got.Unmap() {
			t.Fatalf("clientIP = %v, not unmapped", got)
		}
		if p := peer.Addr().Unmap(); !s.trustedProxy(p) {
			if got != p {
				t.Fatalf("untrusted peer %v, clientIP = %v", p, got)
			}
			return
		}
		hops := strings.Split(xff1+","+xff2, ",")
		chain := []netip.Addr{peer.Addr().Unmap()} // from the right
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			chain = append(chain, a.Unmap())
		}
		for i, a := range chain {
			if a == got {
				for _, right := range chain[:i] {
					if !s.trustedProxy(right) {
						t.Fatalf("clientIP = %v, but %v right of it is not a trusted proxy (chain %v)", got, right, chain)
					}
				}
				if !s.trustedProxy(got) || i == len(chain)-1 {
					return
				}
			}
		}
		t.Fatalf("clientIP = %v: not the first untrusted address from the right of %v", got, chain)
	})
}

// FuzzRequestID: a client's X-Request-Id is kept exactly when it is 1 to 64
// characters of the id alphabet (the same rule as inventory.ValidID);
// anything else is replaced by a fresh id of 24 hex digits.
func FuzzRequestID(f *testing.F) {
	for _, id := range []string{"req-1", "a:b.c_d-E", "", strings.Repeat("x", 64), strings.Repeat("x", 65), "bad id", "x\r\nInjected: 1", "é"} {
		f.Add(id)
	}
	s := &Service{log: slog.New(slog.DiscardHandler)}
	h := s.harden(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, requestID(r))
	}))
	f.Fuzz(func(t *testing.T, id string) {
		if validRequestID(id) != inventory.ValidID(id) {
			t.Fatalf("validRequestID(%q) = %v, ValidID says %v", id, validRequestID(id), inventory.ValidID(id))
		}
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.Header["X-Request-Id"] = []string{id}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Header().Get("X-Request-Id")
		if got != w.Body.String() {
			t.Fatalf("response header %q, the request's logs %q", got, w.Body.String())
		}
		if validRequestID(id) {
			if got != id {
				t.Fatalf("valid id %q echoed as %q", id, got)
			}
			return
		}
		if _, err := hex.DecodeString(got); err != nil || len(got) != 24 {
			t.Fatalf("id %q replaced by %q, not 24 hex digits", id, got)
		}
	})
}

// FuzzParseLimits: the service's rate limit configuration is accepted
// exactly when each scope is "off", empty (its default) or a spec
// ratelimit.ParseLimit takes, and every trusted proxy is an address or a
// CIDR prefix; once accepted, each scope holds the parsed limit (nil for
// off) and every configured address is a trusted proxy. Errors are one
// line.
func FuzzParseLimits(f *testing.F) {
	f.Add("5/s,burst=10", "off", "", "10.0.0.0/8,192.0.2.1")
	f.Add("", "20/s,burst=40", "2000/s", "::1,fe80::/10")
	f.Add("off", "5", "x/s", "10.0.0.300")
	f.Add("1/1us", "off", "off", "10.0.0.1/33,::ffff:10.0.0.1")
	f.Add("", "", "", "fe80::1%eth0")
	f.Add("", "", "", "::ffff:10.0.0.0/104,::ffff:0:0/95")
	f.Fuzz(func(t *testing.T, user, ip, sale, proxies string) {
		var list []string
		if proxies != "" {
			list = strings.Split(proxies, ",")
		}
		s := &Service{cfg: Config{RateLimitUser: user, RateLimitIP: ip, RateLimitSale: sale, TrustedProxies: list}}
		err := s.parseLimits()
		okSpec := func(spec string) bool {
			_, perr := ratelimit.ParseLimit(spec)
			return spec == "" || spec == rateLimitOff || perr == nil
		}
		// A zone could never match a client address (compared without one);
		// an IPv4-mapped prefix must cover the ::ffff:0:0/96 part.
		okProxy := func(p string) bool {
			if pr, perr := netip.ParsePrefix(p); perr == nil {
				return !pr.Addr().Is4In6() || pr.Bits() >= 96
			}
			a, aerr := netip.ParseAddr(p)
			return aerr == nil && a.Zone() == ""
		}
		want := okSpec(user) && okSpec(ip) && okSpec(sale)
		for _, p := range list {
			want = want && okProxy(p)
		}
		if (err == nil) != want {
			t.Fatalf("parseLimits(%q, %q, %q, %q) = %v; want accepted=%v", user, ip, sale, list, err, want)
		}
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		for _, c := range []struct {
			spec, def string
			got       *ratelimit.Limit
		}{{user, DefaultRateLimitUser, s.limits.user}, {ip, rateLimitOff, s.limits.ip}, {sale, rateLimitOff, s.limits.sale}} {
			spec := orDefault(c.spec, c.def)
			if spec == rateLimitOff {
				if c.got != nil {
					t.Fatalf("%q parsed as %v, want off", spec, c.got)
				}
				continue
			}
			if l, _ := ratelimit.ParseLimit(spec); c.got == nil || *c.got != l {
				t.Fatalf("%q parsed as %v, want %v", spec, c.got, l)
			}
		}
		for _, p := range list {
			a, err := netip.ParseAddr(p)
			if err != nil {
				a = netip.MustParsePrefix(p).Addr()
			}
			if !s.trustedProxy(a.Unmap()) {
				t.Fatalf("%q is configured, but %v is not a trusted proxy", p, a)
			}
		}
	})
}

// FuzzRedisURLSecret: a Redis URL "redis://user:password@rest" the service
// cannot parse fails start with an error that does not show the password
// (the error is printed, and logged by whatever runs the service).
func FuzzRedisURLSecret(f *testing.F) {
	f.Add("", "hunter2-secret", "host:6379/0")
	f.Add("u", "hunter2-secret", "h:1/0?dial_timeout=zz")
	f.Add("", "hunter2-secret", "host:6379/abc")
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		url := "redis://" + user + ":" + password + "@" + rest
		if len(password) < 8 || strings.Contains("redis://"+user+rest, password) || strings.Contains("bad redis url: parse invalid", password) {
			return // too short to tell apart from the rest of the message
		}
		if _, err := redis.ParseURL(url); err == nil {
			return // it would dial: not this test's business
		}
		s := &Service{cfg: Config{RedisURL: url}, log: slog.New(slog.DiscardHandler)}
		err := s.connectRedis(context.Background())
		if err == nil {
			t.Fatalf("connectRedis(%q) succeeded", url)
		}
		if strings.Contains(err.Error(), password) {
			t.Fatalf("the error shows the password %q: %v", password, err)
		}
	})
}

// spendToken spends a checked token on its own under the key buy.lua spends
// it under (the buy script itself spends it only with an accepted buy), so
// the fuzz target checks a token's single use without a sale to buy from.
func spendToken(ctx context.Context, s *Service, saleID, user string, t purchaseToken) error {
	fresh, err := s.rdb.SetNX(ctx, s.eng.Key(saleID, "ptoken:"+t.nonce), user, t.ttl).Result()
	if err != nil {
		return err
	}
	if !fresh {
		return errTokenDenied
	}
	return nil
}
