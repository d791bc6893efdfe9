package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sum is SHA-256 of s as lowercase hex, written here from crypto/sha256
// directly so that the tests do not check the code by its own helpers.
func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// testSecret is a fixed secret for the vectors below.
var testSecret = strings.Repeat("00112233445566778899aabbccddeeff", 2)

// TestDrawKnownVector: a small draw, computed step by step from
// crypto/sha256 as the contract writes it, and pinned to the values an
// independent implementation (Python's hashlib) gave for it.
func TestDrawKnownVector(t *testing.T) {
	users := []string{"alice", "bob", "carol", "dave"}
	d, err := RunDraw("s1", testSecret, users)
	if err != nil {
		t.Fatal(err)
	}

	// By hand.
	byEntry := map[string]string{}
	var entries []string
	for _, u := range users {
		e := sum("s1\n" + u)
		byEntry[e] = u
		entries = append(entries, e)
	}
	slices.Sort(entries)
	digest := sum(strings.Join(entries, "\n"))
	seed := sum(testSecret + "\n" + digest)
	order := slices.Clone(entries)
	slices.SortFunc(order, func(a, b string) int { return strings.Compare(sum(seed+"\n"+a), sum(seed+"\n"+b)) })
	want := Draw{Commitment: sum(testSecret), Secret: testSecret, Digest: digest, Seed: seed, Entries: entries, Order: order}
	if !equalDraws(d, want) {
		t.Errorf("RunDraw:\n%+v\nby hand:\n%+v", d, want)
	}

	// Pinned: hashlib.sha256 over the same text.
	for _, c := range []struct{ name, got, want string }{
		{"commitment", d.Commitment, "2a8abfa8cb9906290437854193ca6bca41d4d4e26d1d454bd66a35158095e737"},
		{"entry of bob", Entry("s1", "bob"), "01e0b4ea46011e7a9c9b63492c42165a6f7f183ae6e078f3fec46a5fcaa69ac1"},
		{"digest", d.Digest, "3137c80ff8e8e80475140f08886f3db827434ba8908dddd7fded9c22da200e57"},
		{"seed", d.Seed, "4ca53ece883d84c4af82ebf32b3bd52f0a32628cf5942bdee78027afd6dd730d"},
	} {
		if c.got != c.want {
			t.Errorf("%s %s, want %s", c.name, c.got, c.want)
		}
	}
	var drawn []string
	for _, e := range d.Order {
		drawn = append(drawn, byEntry[e])
	}
	if w := []string{"carol", "dave", "bob", "alice"}; !slices.Equal(drawn, w) {
		t.Errorf("drawn %v, want %v", drawn, w)
	}
}

// TestRunDrawArrivalWorthNothing: the draw depends on who is in it, not on
// the order they joined in.
func TestRunDrawArrivalWorthNothing(t *testing.T) {
	users := randomUsers(rand.New(rand.NewPCG(1, 2)), 500)
	first, err := RunDraw("sale-a", testSecret, users)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3 {
		rng.Shuffle(len(users), func(i, j int) { users[i], users[j] = users[j], users[i] })
		d, err := RunDraw("sale-a", testSecret, users)
		if err != nil || !equalDraws(d, first) {
			t.Fatalf("the same buyers joined in another order drew differently (%v)", err)
		}
	}
	// And the order is the entries', each once, not the entries' own.
	if slices.Equal(first.Order, first.Entries) || !slices.Equal(slices.Sorted(slices.Values(first.Order)), first.Entries) {
		t.Errorf("the order is not a shuffle of the entries")
	}
	// Another secret draws another order of the same entries.
	other, err := RunDraw("sale-a", strings.Repeat("ab", 32), users)
	if err != nil || !slices.Equal(other.Entries, first.Entries) || slices.Equal(other.Order, first.Order) {
		t.Errorf("another secret: same entries %v, same order %v (%v)",
			slices.Equal(other.Entries, first.Entries), slices.Equal(other.Order, first.Order), err)
	}
}

func TestRunDrawRefuses(t *testing.T) {
	if _, err := RunDraw("s", testSecret, []string{"a", "b", "c", "b"}); !errors.Is(err, ErrDuplicateUser) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("a user twice: %v, want ErrDuplicateUser naming b", err)
	}
	for _, secret := range []string{"", "abc", strings.ToUpper(testSecret), testSecret[:63] + "g", testSecret + "0"} {
		if _, err := RunDraw("s", secret, []string{"a"}); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("secret %q: %v, want ErrInvalidSecret", secret, err)
		}
	}
}

// TestDrawJSON: the record's JSON, before the draw and after one nobody
// joined in time.
func TestDrawJSON(t *testing.T) {
	b, _ := json.Marshal(Draw{Commitment: sum(testSecret)})
	if want := `{"commitment":"` + sum(testSecret) + `"}`; string(b) != want {
		t.Errorf("before the draw: %s, want %s", b, want)
	}
	d, err := RunDraw("s", testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(d)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"commitment": `"` + sum(testSecret) + `"`, "secret": `"` + testSecret + `"`,
		"digest": `"` + sum("") + `"`, "seed": `"` + sum(testSecret+"\n"+sum("")) + `"`, "entries": `[]`, "order": `[]`} {
		if string(fields[k]) != want {
			t.Errorf("empty draw: %s is %s, want %s", k, fields[k], want)
		}
	}
	if len(fields) != 6 {
		t.Errorf("empty draw: %s has %d fields, want 6", b, len(fields))
	}
	var back Draw
	if err := json.Unmarshal(b, &back); err != nil || Verify(back) != nil {
		t.Errorf("the empty draw read back: %v, %v", err, Verify(back))
	}
}

func TestNewSecret(t *testing.T) {
	s1, c1, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s2, _, _ := NewSecret()
	if !isHex64(s1) || c1 != sum(s1) || s1 == s2 {
		t.Errorf("NewSecret: %q, commitment %q (want %q), again %q", s1, c1, sum(s1), s2)
	}
	if _, err := RunDraw("s", s1, []string{"u"}); err != nil {
		t.Errorf("RunDraw refuses NewSecret's secret: %v", err)
	}
}

func equalDraws(a, b Draw) bool {
	return a.Commitment == b.Commitment && a.Secret == b.Secret && a.Digest == b.Digest && a.Seed == b.Seed &&
		slices.Equal(a.Entries, b.Entries) && slices.Equal(a.Order, b.Order)
}

// randomUsers returns n distinct user ids of 1 to 24 characters, some of
// them beyond ASCII (the hashes are over UTF-8).
func randomUsers(rng *rand.Rand, n int) []string {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-éü日本€😀")
	seen := map[string]bool{}
	users := make([]string, 0, n)
	for len(users) < n {
		r := make([]rune, 1+rng.IntN(24))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if u := string(r); !seen[u] {
			seen[u] = true
			users = append(users, u)
		}
	}
	return users
}

// BenchmarkRunDraw: the draw of a room of 1,000,000 buyers with
// 16-character user ids.
func BenchmarkRunDraw(b *testing.B) {
	users := make([]string, 1_000_000)
	for i := range users {
		users[i] = fmt.Sprintf("user-%011d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RunDraw("launch", testSecret, users); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify: checking the published draw of 1,000,000 buyers.
func BenchmarkVerify(b *testing.B) {
	users := make([]string, 1_000_000)
	for i := range users {
		users[i] = fmt.Sprintf("user-%011d", i)
	}
	d, err := RunDraw("launch", testSecret, users)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(d); err != nil {
			b.Fatal(err)
		}
	}
}
