package admission

import "fmt"

// Check names one of the checks Verify makes of a published draw, in the
// order it makes them.
type Check string

const (
	// CheckSecret: the secret is revealed, as 64 lowercase hex characters
	// (a record without one is a draw that has not run).
	CheckSecret Check = "secret"
	// CheckCommitment: SHA-256(secret) is the commitment published before
	// anyone joined, so the secret is the one chosen then.
	CheckCommitment Check = "commitment"
	// CheckEntries: the entries are 64 lowercase hex characters each,
	// strictly ascending (so none is there twice).
	CheckEntries Check = "entries"
	// CheckDigest: the digest is SHA-256 of the entries joined with "\n",
	// so the seed below covers exactly these entries.
	CheckDigest Check = "digest"
	// CheckSeed: the seed is SHA-256(secret + "\n" + digest).
	CheckSeed Check = "seed"
	// CheckOrder: the order is the entries, each once, sorted ascending by
	// SHA-256(seed + "\n" + e).
	CheckOrder Check = "order"
)

// VerifyError is Verify's answer for a draw that does not check: the
// first check that failed and what it found.
type VerifyError struct {
	Check  Check
	Detail string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("admission: the draw's %s check failed: %s", e.Check, e.Detail)
}

// Verify checks a published draw from the record alone, as anyone can:
// the secret against the commitment, the entries, the digest, the seed,
// and the order recomputed from them. It returns nil if every check
// passes, else a *VerifyError naming the first that failed.
func Verify(d Draw) error {
	fail := func(c Check, format string, args ...any) error {
		return &VerifyError{Check: c, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case d.Secret == "":
		return fail(CheckSecret, "the record reveals no secret: the draw has not run")
	case !isHex64(d.Secret):
		return fail(CheckSecret, "the secret %q is not 64 lowercase hex characters", d.Secret)
	}
	if c := hashHex(d.Secret); c != d.Commitment {
		return fail(CheckCommitment, "SHA-256(secret) is %s, the commitment %q", c, d.Commitment)
	}
	for i, e := range d.Entries {
		switch {
		case !isHex64(e):
			return fail(CheckEntries, "entries[%d] %q is not 64 lowercase hex characters", i, e)
		case i > 0 && e == d.Entries[i-1]:
			return fail(CheckEntries, "entries[%d] repeats entries[%d]", i, i-1)
		case i > 0 && e < d.Entries[i-1]:
			return fail(CheckEntries, "entries[%d] sorts before entries[%d]: not ascending", i, i-1)
		}
	}
	digest := digestOf(d.Entries)
	if digest != d.Digest {
		return fail(CheckDigest, "SHA-256 of the %d entries is %s, the record says %q", len(d.Entries), digest, d.Digest)
	}
	seed := seedOf(d.Secret, digest)
	if seed != d.Seed {
		return fail(CheckSeed, "SHA-256(secret + \"\\n\" + digest) is %s, the record says %q", seed, d.Seed)
	}
	if len(d.Order) != len(d.Entries) {
		return fail(CheckOrder, "the order has %d entries, the draw %d", len(d.Order), len(d.Entries))
	}
	for i, e := range orderOf(seed, d.Entries) {
		if d.Order[i] != e {
			return fail(CheckOrder, "order[%d] is %q, the draw's is %s", i, d.Order[i], e)
		}
	}
	return nil
}
