package admission

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestVerifyAcceptsDraws(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 3, 100} {
		d, err := RunDraw("s", testSecret, randomUsers(rng, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(d); err != nil {
			t.Errorf("%d buyers: %v", n, err)
		}
	}
}

// TestVerifyTamper: every field changed after the draw is caught, by the
// check that covers it.
func TestVerifyTamper(t *testing.T) {
	d, err := RunDraw("s", testSecret, randomUsers(rand.New(rand.NewPCG(7, 8)), 50))
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("ab", 32)
	// A record consistent with itself in all but the order: a re-draw of
	// other entries that keeps the old order.
	sybil := slices.Concat(d.Entries, []string{strings.Repeat("f", 64)})
	for _, c := range []struct {
		name   string
		tamper func(d *Draw)
		want   Check
	}{
		{"no secret (before the draw)", func(d *Draw) { d.Secret = "" }, CheckSecret},
		{"secret in capitals", func(d *Draw) { d.Secret = strings.ToUpper(d.Secret) }, CheckSecret},
		{"secret too short", func(d *Draw) { d.Secret = d.Secret[:62] }, CheckSecret},
		{"another secret", func(d *Draw) { d.Secret = other }, CheckCommitment},
		{"another commitment", func(d *Draw) { d.Commitment = sum(other) }, CheckCommitment},
		{"commitment in capitals", func(d *Draw) { d.Commitment = strings.ToUpper(d.Commitment) }, CheckCommitment},
		{"an entry not hex", func(d *Draw) { d.Entries[3] = strings.Repeat("z", 64) }, CheckEntries},
		{"an entry in capitals", func(d *Draw) { d.Entries[3] = strings.ToUpper(d.Entries[3]) }, CheckEntries},
		{"an entry short", func(d *Draw) { d.Entries[3] = d.Entries[3][:63] }, CheckEntries},
		{"two entries swapped", func(d *Draw) { d.Entries[3], d.Entries[4] = d.Entries[4], d.Entries[3] }, CheckEntries},
		{"an entry twice", func(d *Draw) { d.Entries[4] = d.Entries[3] }, CheckEntries},
		{"an entry added", func(d *Draw) { d.Entries = append(d.Entries, strings.Repeat("f", 64)) }, CheckDigest},
		{"an entry dropped", func(d *Draw) { d.Entries = d.Entries[1:] }, CheckDigest},
		{"another digest", func(d *Draw) { d.Digest = sum("x") }, CheckDigest},
		{"another seed", func(d *Draw) { d.Seed = sum("x") }, CheckSeed},
		{"seed of the secret alone", func(d *Draw) { d.Seed = sum(d.Secret) }, CheckSeed},
		{"order swapped", func(d *Draw) { d.Order[0], d.Order[1] = d.Order[1], d.Order[0] }, CheckOrder},
		{"order reversed", func(d *Draw) { slices.Reverse(d.Order) }, CheckOrder},
		{"order is the entries'", func(d *Draw) { d.Order = slices.Clone(d.Entries) }, CheckOrder},
		{"order short of one", func(d *Draw) { d.Order = d.Order[:len(d.Order)-1] }, CheckOrder},
		{"order with one twice", func(d *Draw) { d.Order[len(d.Order)-1] = d.Order[0] }, CheckOrder},
		{"order with a stranger", func(d *Draw) { d.Order[7] = strings.Repeat("0", 64) }, CheckOrder},
		{"re-drawn with a sybil, old order", func(d *Draw) {
			d.Entries = slices.Clone(sybil)
			d.Digest = sum(strings.Join(sybil, "\n"))
			d.Seed = sum(d.Secret + "\n" + d.Digest)
			d.Order = append(d.Order, sybil[len(sybil)-1])
		}, CheckOrder},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := d
			bad.Entries, bad.Order = slices.Clone(d.Entries), slices.Clone(d.Order)
			c.tamper(&bad)
			err := Verify(bad)
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Check != c.want {
				t.Fatalf("Verify: %v; want the %s check to fail", err, c.want)
			}
			if !strings.Contains(err.Error(), string(c.want)) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: want one line naming the %s check", err, c.want)
			}
		})
	}
	if err := Verify(d); err != nil {
		t.Errorf("the draw itself after the tampering of copies: %v", err)
	}
}
