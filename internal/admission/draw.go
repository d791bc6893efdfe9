package admission

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Draw is the published record of a room's draw, the JSON of
// GET /v1/sales/{sale}/queue/draw. Before the draw only Commitment is set
// (and only it is marshalled); after it every field is, Entries and Order
// as arrays even when nobody joined in time.
//
// Every hash is SHA-256 over the UTF-8 text shown, written as 64 lowercase
// hex characters:
//
//	Commitment = SHA-256(Secret)
//	e          = SHA-256(sale_id + "\n" + user_id), one entry per buyer
//	Entries    = the entries of everyone who joined before draw_until, ascending
//	Digest     = SHA-256(Entries joined with "\n")
//	Seed       = SHA-256(Secret + "\n" + Digest)
//	Order      = Entries sorted ascending by SHA-256(Seed + "\n" + e)
type Draw struct {
	Commitment string   `json:"commitment"`
	Secret     string   `json:"secret,omitempty"`
	Digest     string   `json:"digest,omitempty"`
	Seed       string   `json:"seed,omitempty"`
	Entries    []string `json:"entries,omitzero"`
	Order      []string `json:"order,omitzero"`
}

// hexLen is the length of every hash of a draw as text.
const hexLen = 2 * sha256.Size

var (
	// ErrInvalidSecret: RunDraw was given a secret that is not 64
	// lowercase hex characters.
	ErrInvalidSecret = errors.New("admission: the secret is not 64 lowercase hex characters")
	// ErrDuplicateUser: RunDraw was given the same user twice; a room
	// holds one place per user.
	ErrDuplicateUser = errors.New("admission: a user is in the draw twice")
)

// NewSecret picks a room's random 32-byte secret, as 64 lowercase hex
// characters, and the commitment to it that is published at once. The
// secret is revealed only by the draw.
func NewSecret() (secret, commitment string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("admission: a secret: %w", err)
	}
	secret = hex.EncodeToString(b[:])
	return secret, hashHex(secret), nil
}

// Entry is a buyer's entry in a sale's draw, SHA-256(sale_id + "\n" +
// user_id): the published list names no user, and a buyer finds their own
// entry by hashing their id.
func Entry(saleID, userID string) string {
	return hashHex(saleID + "\n" + userID)
}

// RunDraw draws the order of userIDs, everyone who joined the sale's room
// before draw_until, with the room's secret. The order of userIDs does not
// matter: the same buyers and secret give the same Draw. A user named
// twice is refused (ErrDuplicateUser), as is a malformed secret.
func RunDraw(saleID, secret string, userIDs []string) (Draw, error) {
	if !isHex64(secret) {
		return Draw{}, ErrInvalidSecret
	}
	sums := make([][sha256.Size]byte, len(userIDs))
	buf := append([]byte(saleID), '\n')
	prefix := len(buf)
	for i, u := range userIDs {
		buf = append(buf[:prefix], u...)
		sums[i] = sha256.Sum256(buf)
	}
	ranks := ascending(sums)
	for j := 1; j < len(ranks); j++ {
		if sums[ranks[j].i] == sums[ranks[j-1].i] {
			return Draw{}, fmt.Errorf("%w: %q", ErrDuplicateUser, userIDs[ranks[j].i])
		}
	}
	// The entries as text, in one string: each is a slice of it.
	var all strings.Builder
	all.Grow(len(sums) * hexLen)
	var text [hexLen]byte
	for _, r := range ranks {
		hex.Encode(text[:], sums[r.i][:])
		all.Write(text[:])
	}
	joined := all.String()
	entries := make([]string, len(sums))
	for j := range entries {
		entries[j] = joined[j*hexLen : (j+1)*hexLen]
	}
	d := Draw{Commitment: hashHex(secret), Secret: secret, Digest: digestOf(entries), Entries: entries}
	d.Seed = seedOf(secret, d.Digest)
	d.Order = orderOf(d.Seed, entries)
	return d, nil
}

// digestOf is SHA-256 of the entries joined with "\n", hashed through a
// buffer of its own (not an allocation per entry).
func digestOf(entries []string) string {
	h := sha256.New()
	buf := make([]byte, 0, 64<<10)
	for i, e := range entries {
		if len(buf)+1+len(e) > cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
		if i > 0 {
			buf = append(buf, '\n')
		}
		buf = append(buf, e...)
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// seedOf is SHA-256(secret + "\n" + digest).
func seedOf(secret, digest string) string {
	return hashHex(secret + "\n" + digest)
}

// orderOf is the draw's order: the entries sorted ascending by
// SHA-256(seed + "\n" + e). Entries come ascending and unique, so ties
// (which SHA-256 does not give) would keep them ascending.
func orderOf(seed string, entries []string) []string {
	keys := make([][sha256.Size]byte, len(entries))
	buf := append([]byte(seed), '\n')
	prefix := len(buf)
	for i, e := range entries {
		buf = append(buf[:prefix], e...)
		keys[i] = sha256.Sum256(buf)
	}
	order := make([]string, len(entries))
	for j, r := range ascending(keys) {
		order[j] = entries[r.i]
	}
	return order
}

// rank is a hash's place in ascending: its first 8 bytes, which decide
// nearly every comparison, and its index.
type rank struct {
	head uint64
	i    int32
}

// ascending sorts the indexes of sums by the hashes' bytes (the order of
// their lowercase hex text too), ties by index.
func ascending(sums [][sha256.Size]byte) []rank {
	ranks := make([]rank, len(sums))
	for i := range sums {
		ranks[i] = rank{binary.BigEndian.Uint64(sums[i][:8]), int32(i)}
	}
	slices.SortFunc(ranks, func(a, b rank) int {
		if c := cmp.Compare(a.head, b.head); c != 0 {
			return c
		}
		if c := bytes.Compare(sums[a.i][8:], sums[b.i][8:]); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	return ranks
}

// hashHex is SHA-256 of s as 64 lowercase hex characters.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// isHex64 reports whether s is written as a draw's hashes are: 64
// lowercase hex characters.
func isHex64(s string) bool {
	if len(s) != hexLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
