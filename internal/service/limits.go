package service

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/store"
)

// Rate limits guard the buying flow (buys and purchase tokens), checked
// after the request is authenticated and well-formed and before any
// inventory work or purchase-token use, so a throttled request costs the
// buyer nothing but the wait. Three scopes, each with its own key:
//
//   - user: one buyer's requests ("u:<user>"), default 5/s with a burst of 10;
//   - ip: one client's ("ip:<addr>", clientOf: an IPv4 address, or the
//     first address of an IPv6 /64), default off: buyers behind one NAT or proxy share an address,
//     and so does a load test;
//   - sale: every buyer of one sale together ("s:<sale>"), default off.
//
// A sale may set its own limit for any scope ("off" included). Purchase
// tokens are limited per user under their own key ("pt:<user>"), so asking
// for tokens does not eat the buys. When Redis cannot be asked, each
// instance enforces its share (1/Instances) of every limit in process.

// Default rate limits.
const (
	DefaultRateLimitUser = "5/s,burst=10"
	rateLimitOff         = "off"
)

// limits are the service-wide rate limits, parsed; nil is off.
type limits struct {
	user, ip, sale *ratelimit.Limit
	trusted        []netip.Prefix
}

// parseLimitSpec reads a ParseLimit spec or "off" (nil).
func parseLimitSpec(spec string) (*ratelimit.Limit, error) {
	if spec == rateLimitOff {
		return nil, nil
	}
	l, err := ratelimit.ParseLimit(spec)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

func (s *Service) parseLimits() error {
	for _, c := range []struct {
		name, spec, def string
		out             **ratelimit.Limit
	}{
		{"user", s.cfg.RateLimitUser, DefaultRateLimitUser, &s.limits.user},
		{"ip", s.cfg.RateLimitIP, rateLimitOff, &s.limits.ip},
		{"sale", s.cfg.RateLimitSale, rateLimitOff, &s.limits.sale},
	} {
		l, err := parseLimitSpec(orDefault(c.spec, c.def))
		if err != nil {
			return fmt.Errorf("bad %s rate limit %q: want e.g. 5/s,burst=10 or off", c.name, c.spec)
		}
		*c.out = l
	}
	for _, p := range s.cfg.TrustedProxies {
		prefix, err := trustedPrefix(p)
		if err != nil {
			return err
		}
		s.limits.trusted = append(s.limits.trusted, prefix)
	}
	return nil
}

// trustedPrefix reads a trusted proxy: an address or a CIDR prefix. Client
// addresses are compared unmapped and without a zone, so an IPv4-mapped
// prefix becomes its IPv4 prefix, and a zone is refused (it could never
// match).
func trustedPrefix(p string) (netip.Prefix, error) {
	bad := fmt.Errorf("bad trusted proxy %q: want an address or a CIDR prefix, without a zone", p)
	prefix, err := netip.ParsePrefix(p)
	if err != nil {
		addr, aerr := netip.ParseAddr(p)
		if aerr != nil || addr.Zone() != "" {
			return netip.Prefix{}, bad
		}
		addr = addr.Unmap()
		return netip.PrefixFrom(addr, addr.BitLen()), nil
	}
	if addr := prefix.Addr(); addr.Is4In6() {
		bits := prefix.Bits() - 96
		if bits < 0 {
			return netip.Prefix{}, fmt.Errorf("bad trusted proxy %q: an IPv4-mapped prefix needs at least 96 bits", p)
		}
		prefix = netip.PrefixFrom(addr.Unmap(), bits)
	}
	return prefix.Masked(), nil
}

// checkSaleLimits validates a sale's own limits, as given at its creation.
func checkSaleLimits(r RateLimits) error {
	for _, c := range []struct{ field, spec string }{{"per_user", r.PerUser}, {"per_ip", r.PerIP}, {"per_sale", r.PerSale}} {
		if c.spec == "" {
			continue
		}
		if _, err := parseLimitSpec(c.spec); err != nil {
			return errInvalid("rate_limits." + c.field + " must be like 5/s,burst=10 or off")
		}
	}
	return nil
}

// saleSettings are a sale's service-level settings with its rate limits
// resolved once, when the sale is first read: its own, else the service's;
// nil is off.
type saleSettings struct {
	store.Sale
	SaleSettings
	user, ip, sale *ratelimit.Limit
	// userInBuy is the user limit as the buy's throttle when buy.lua checks
	// it itself, in the buy's own call, after answering a repeat (a GCRA
	// limit); nil: it is checked apart, before.
	userInBuy *inventory.Throttle
	// missing: the database has no such sale (a cache entry of settings,
	// missingSaleTTL long); nothing else is set.
	missing bool
}

func (s *Service) resolve(sale store.Sale, settings SaleSettings) saleSettings {
	own := func(spec string, def *ratelimit.Limit) *ratelimit.Limit {
		if spec == "" {
			return def
		}
		l, _ := parseLimitSpec(spec) // checked at creation
		return l
	}
	rl := settings.RateLimits
	st := saleSettings{Sale: sale, SaleSettings: settings, user: own(rl.PerUser, s.limits.user),
		ip: own(rl.PerIP, s.limits.ip), sale: own(rl.PerSale, s.limits.sale)}
	if st.user != nil {
		if _, err := st.user.Bucket(); err == nil { // a GCRA limit
			st.userInBuy = &inventory.Throttle{Rate: st.user.Rate, Period: st.user.Period, Burst: st.user.Burst}
		}
	}
	return st
}

// saleFor is the sale of a request of the buying flow (what: "u" a buy,
// "pt" a purchase token) by user, once the request has passed the sale's
// limits (throttle). A sale this instance does not know (never read, read
// long ago, or remembered missing) is looked up only after a check of its
// own, under the service's user and address limits ("lookup:<user>"):
// naming sales that do not exist is throttled like any other hammering
// (404, then 429), and costs the database a look-up per allowed request
// at most, one per missingSaleTTL for any one id.
func (s *Service) saleFor(ctx context.Context, o origin, saleID, user, what string) (saleSettings, error) {
	settings, known := s.saleCache.Get(saleID, time.Now().UnixNano())
	if !known || settings.missing {
		if err := s.throttle(ctx, o, saleSettings{user: s.limits.user, ip: s.limits.ip}, user, "lookup"); err != nil {
			return saleSettings{}, err
		}
		var err error
		if settings, err = s.settings(ctx, saleID); err != nil {
			return saleSettings{}, err
		}
	}
	return settings, s.throttle(ctx, o, settings, user, what)
}

// throttle checks the buying flow's limits for one request from o; what
// is the scope prefix of the user's key ("u" for buys, "pt" for purchase
// tokens).
//
// A buy's user limit is left to the buy itself when sale.userInBuy is set.
func (s *Service) throttle(ctx context.Context, o origin, sale saleSettings, user, what string) error {
	if sale.user != nil && (what != "u" || sale.userInBuy == nil) {
		if err := s.allow(ctx, "user", what+":"+user, sale.user); err != nil {
			return err
		}
	}
	if sale.ip != nil {
		// No address when not over TCP (a test's fake request) or not
		// given (a caller in Go): nothing to limit.
		if ip := s.addrOf(o); ip.IsValid() {
			// The client's first address names it: a key has no "/".
			if err := s.allow(ctx, "ip", "ip:"+clientOf(ip).Addr().String(), sale.ip); err != nil {
				return err
			}
		}
	}
	if sale.sale != nil {
		return s.allow(ctx, "sale", "s:"+sale.ID, sale.sale)
	}
	return nil
}

// allow counts one hit of key under limit, or answers 429. While Redis
// did not answer this instance's last ping, the in-process fallback
// answers at once: buys from the database (degraded mode) must not wait
// for Redis's timeouts.
func (s *Service) allow(ctx context.Context, scope, key string, limit *ratelimit.Limit) error {
	var res ratelimit.Result
	var err error
	if s.seller.RedisUnreachable() {
		res, err = s.local.Allow(ctx, key, *limit)
		s.live.lastFallback.Store(time.Now().UnixNano())
	} else {
		res, err = s.limiter.Allow(ctx, key, *limit)
		// While the database sells, a hit Redis counted is counted in
		// process too: should Redis stop answering, the fallback goes on
		// from there, not from a fresh burst (a buyer's limit was twice
		// its burst across a ping that timed out). The other way, hits
		// the fallback counted are not told to Redis once it answers
		// again. Not while Redis sells: the buys' own limit is buy.lua's.
		if err == nil && res.Allowed && !res.Degraded && !s.seller.RedisSells() {
			_, _ = s.local.Allow(ctx, key, *limit)
		}
	}
	if err != nil {
		return err
	}
	if res.Allowed {
		return nil
	}
	return s.limited(scope, limit, res.RetryAfter)
}

// limited counts a refusal by the scope's limit and returns it (toAPI
// answers it 429, with Retry-After in whole seconds, at least 1).
func (s *Service) limited(scope string, limit *ratelimit.Limit, retryAfter time.Duration) error {
	s.metrics.rateLimited.WithLabelValues(scope).Inc()
	secs := max(int((retryAfter+time.Second-1)/time.Second), 1)
	return &limitError{ThrottledError: inventory.ThrottledError{RetryAfter: retryAfter},
		answer: apiError{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: secs,
			Message: fmt.Sprintf("too many requests: the %s limit is %s; retry in %d s", scope, limit, secs)}}
}

// limitError is a refusal by one of the rate limits of the buying flow:
// the *inventory.ThrottledError errors.As finds (it matches
// inventory.ErrThrottled), and its 429, which names the limit.
type limitError struct {
	inventory.ThrottledError
	answer apiError
}

func (e *limitError) Error() string { return "seckill: " + e.answer.Message }

func (e *limitError) Unwrap() error { return &e.ThrottledError }

// clientIP is the address the request came from: the peer's, unless the
// peer is a trusted proxy; then X-Forwarded-For is read from the right,
// skipping trusted proxies, and the first other address is the client.
func (s *Service) clientIP(r *http.Request) netip.Addr {
	return s.clientIPOf(&httpExchange{r: r})
}

// clientIPOf is clientIP of any server's exchange.
func (s *Service) clientIPOf(x exchange) netip.Addr {
	ap := x.peer()
	if !ap.IsValid() {
		return netip.Addr{}
	}
	addr := ap.Addr().Unmap()
	if !s.trustedProxy(addr) {
		return addr
	}
	hops := strings.Split(strings.Join(x.headerValues("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return addr // garbage: the last address a trusted proxy vouched for
		}
		addr = hop.Unmap()
		if !s.trustedProxy(addr) {
			return addr
		}
	}
	return addr
}

// clientOf is the client an address belongs to: the address itself
// (IPv4), or its /64 (IPv6): a host is given a /64 (RFC 6177) and may send
// from any address in it. The per-address rate limit and the live
// streams' caps count clients.
func clientOf(addr netip.Addr) netip.Prefix {
	if addr.Is6() {
		p, _ := addr.WithZone("").Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, addr.BitLen())
}

func (s *Service) trustedProxy(a netip.Addr) bool {
	for _, p := range s.limits.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Challenge is asked before a purchase token is issued: a captcha or
// proof-of-work check, say. It returns nil to let the buyer have a token;
// any error refuses with 403 permission_denied (the error's text is logged,
// not shown).
type Challenge func(ctx context.Context, r *http.Request, user, saleID string) error
