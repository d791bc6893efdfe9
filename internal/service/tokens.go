package service

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Purchase tokens are the "hidden seckill URL": a short-lived token bound to
// one user and one sale, issued only while the sale is active and spent by
// one accepted buy. A token is "<sale>|<user>|<expiry ms>|<nonce>" signed
// with HMAC-SHA256 under a key derived from the JWT secret. Its signature,
// user, sale and expiry are checked here, before the buy; its single use is
// the buy's own: buy.lua spends the nonce (a key under the sale's hash tag,
// "ptoken:<nonce>") only if it accepts the buy, in the same script, so a
// refused buy (unknown sku, sold out, over the limit) leaves the token
// usable, and a repeat of an accepted buy returns its order.
const purchaseTokenTTL = 5 * time.Minute

// tokenKeyOf is the key tokens are signed with, derived from the JWT
// secret (Service.tokenKey: derived once, not per token).
func tokenKeyOf(jwtSecret string) []byte {
	m := hmac.New(sha256.New, []byte(jwtSecret))
	m.Write([]byte("seckill purchase tokens"))
	return m.Sum(nil)
}

func (s *Service) signToken(payload string) string {
	return tokenEncoding.EncodeToString([]byte(payload)) + "." + tokenEncoding.EncodeToString(s.tokenMAC([]byte(payload)))
}

// tokenEncoding is a token's two parts' encoding; strict, so that a token
// has one spelling only.
var tokenEncoding = base64.RawURLEncoding.Strict()

// tokenMAC is payload's HMAC-SHA256 under the token key, from a pool of
// keyed hashes (hmac.New hashes the key anew each time).
func (s *Service) tokenMAC(payload []byte) []byte {
	m, ok := s.macs.Get().(hash.Hash)
	if !ok {
		m = hmac.New(sha256.New, s.tokenKey)
	}
	m.Reset()
	m.Write(payload)
	sum := m.Sum(nil)
	s.macs.Put(m)
	return sum
}

// issuePurchaseToken is POST /v1/sales/{sale}/purchase-tokens:
// IssuePurchaseToken of the request's buyer, under the per-address limit
// too, and with the challenge (Config.Challenge) once the sale is known
// active.
func (s *Service) issuePurchaseToken(w http.ResponseWriter, r *http.Request) error {
	user, err := s.auth.buyer(r)
	if err != nil {
		return err
	}
	saleID := r.PathValue("sale")
	var challenge func() error
	if s.cfg.Challenge != nil {
		challenge = func() error {
			if err := s.cfg.Challenge(r.Context(), r, user, saleID); err != nil {
				s.logFor(r).Info("purchase token refused by the challenge", "sale", saleID, "user", user, "reason", err)
				return &apiError{Status: http.StatusForbidden, Code: "permission_denied", Message: "the challenge was not passed"}
			}
			return nil
		}
	}
	token, expires, err := s.newPurchaseToken(r.Context(), saleID, user, origin{x: exchangeOf(w, r)}, challenge)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": token, "expires_at": expires})
	return nil
}

// makePurchaseToken is a new token of the sale for user, and when it
// expires.
func (s *Service) makePurchaseToken(saleID, user string) (string, time.Time) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	expires := time.Now().Add(purchaseTokenTTL).UTC()
	payload := saleID + "|" + user + "|" + strconv.FormatInt(expires.UnixMilli(), 10) + "|" + hex.EncodeToString(nonce[:])
	return s.signToken(payload), expires
}

// purchaseToken is a checked token: its nonce and how long it stays valid.
type purchaseToken struct {
	nonce string
	ttl   time.Duration // until it expires, plus a minute of clock skew (none gated)
	gate  time.Time     // an admission's until: the room's gate (zero: none)
}

// checkPurchaseToken checks a token's signature, user, sale and expiry; its
// single use is for the buy to check and spend (inventory.BuyRequest.Token).
func (s *Service) checkPurchaseToken(saleID, user, token string) (purchaseToken, error) {
	raw, ok := s.signedPayload(token)
	if !ok {
		return purchaseToken{}, errTokenDenied
	}
	parts := strings.Split(raw, "|")
	if len(parts) != 4 || parts[0] != saleID || parts[1] != user || !inventory.ValidID(parts[3]) {
		return purchaseToken{}, errTokenDenied
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || time.Now().UnixMilli() >= exp {
		return purchaseToken{}, errTokenDenied
	}
	return purchaseToken{nonce: parts[3], ttl: time.Until(time.UnixMilli(exp)) + time.Minute}, nil
}

// signedPayload is the payload of a token the service signed (signToken);
// false for any other string.
func (s *Service) signedPayload(token string) (string, bool) {
	enc, sig, ok := strings.Cut(token, ".")
	if !ok {
		return "", false
	}
	raw, err := tokenEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	mac, err := tokenEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(s.tokenMAC(raw), mac) {
		return "", false
	}
	return string(raw), true
}

// Admission tokens are signed as purchase tokens are, over a payload of
// their own kind, "adm|<sale>|<user>|<admitted_until ms>|<nonce>": five
// fields, the first "adm", where a purchase token's has four, so neither
// is ever read as the other. The nonce is the room's (admission.Place),
// and the token is made again from it at every read of the place: the
// same admission always has the same token. The buy spends the
// admission in the room itself (inventory.CheckedBuy.WithGate).
const admissionKind = "adm"

// makeAdmissionToken is the token of user's admission nonce in the sale,
// valid until until.
func (s *Service) makeAdmissionToken(saleID, user, nonce string, until time.Time) string {
	return s.signToken(admissionKind + "|" + saleID + "|" + user + "|" + strconv.FormatInt(until.UnixMilli(), 10) + "|" + nonce)
}

// admissionToken is a token's admission, its signature, sale and user
// checked: whether it is live is the room's gate's to say, in the buy
// (inventory.CheckedBuy.WithGate).
type admissionToken struct {
	nonce string
	until time.Time
}

// checkAdmissionToken reads an admission token of user in the sale; false
// for anything else (no token, a forged one, a purchase token, another
// buyer's or sale's admission).
func (s *Service) checkAdmissionToken(saleID, user, token string) (admissionToken, bool) {
	raw, ok := s.signedPayload(token)
	if !ok {
		return admissionToken{}, false
	}
	parts := strings.Split(raw, "|")
	if len(parts) != 5 || parts[0] != admissionKind || parts[1] != saleID || parts[2] != user || !inventory.ValidID(parts[4]) {
		return admissionToken{}, false
	}
	until, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return admissionToken{}, false
	}
	return admissionToken{nonce: parts[4], until: time.UnixMilli(until)}, true
}
