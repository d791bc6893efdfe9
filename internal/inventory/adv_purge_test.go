package inventory_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial tests of PurgeArchived's one walk per node (purge.go): the
// walk matches the whole prefix of the engine and picks the sales' keys
// out itself, so every other key under that MATCH — other engines' whose
// prefixes start like this one's, sales whose ids start like a purged
// one's — must survive it.

// setKeys sets every key (for a while) and removes them all at the end of
// the test: some prefixes here are not the test's own, and redistest's
// cleanup would not find their keys.
func (r *rig) setKeys(keys []string) {
	r.t.Helper()
	for _, k := range keys {
		if err := r.rdb.Set(r.ctx, k, "v", 10*time.Minute).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
	r.t.Cleanup(func() {
		for _, k := range keys {
			_ = r.rdb.Unlink(context.Background(), k).Err()
		}
	})
}

// exist returns those of keys Redis holds.
func (r *rig) exist(keys []string) []string {
	r.t.Helper()
	var got []string
	for _, k := range keys {
		n, err := r.rdb.Exists(r.ctx, k).Result()
		if err != nil {
			r.t.Fatal(err)
		}
		if n == 1 {
			got = append(got, k)
		}
	}
	return got
}

// Engines on one Redis whose prefixes are the test's prefix p followed by
// glob-special characters (SCAN's MATCH must escape them or miss the
// engine's own keys), by a "}" (a prefix the hash tag does not end at), and
// by more characters after p (p is a prefix of theirs: the walk of p's
// engine meets their keys). Purging sale "s" (and "s:1") of each engine in
// turn removes exactly that engine's keys of those sales that expire on
// their own; every other key stays, and a purge of an engine none of whose
// keys are there removes nothing.
//
// Not covered, as no purge can tell them apart: engine p's sale "x:s" and
// engine "p:x"'s sale "s" have the very same keys ({p:x:s}:...).
func TestAdvPurgeArchivedPrefixesThatLookAlike(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		p := r.prefix
		prefixes := []string{p, p + "x", p + "*", p + "?", p + "[a]", p + "[", p + `\`, p + "}", p + "}:s", p + ":y", p + "-", p + "*:s"}
		if b.name == "miniredis" {
			// miniredis turns a MATCH into a regular expression quoted
			// with \Q...\E: a "\" in the prefix is its own trouble there.
			prefixes = slices.DeleteFunc(prefixes, func(s string) bool { return s == p+`\` })
		}
		expiring := []string{"op:r1", "ptoken:tok", "tat:1000:7", "throttle:1000", "stage:tok:sale"}
		others := []string{"sale", "mine", "options", "archived"}
		sales := []string{"s", "s:1", "s1", "S", "t"}
		purged := []string{"s", "s:1"}
		// keysOf[prefix][sale] are the expiring keys of a sale of an engine.
		keysOf := map[string]map[string][]string{}
		var all []string
		for _, pre := range prefixes {
			keysOf[pre] = map[string][]string{}
			for _, sale := range sales {
				tag := "{" + pre + ":" + sale + "}:"
				for _, n := range expiring {
					keysOf[pre][sale] = append(keysOf[pre][sale], tag+n)
				}
				all = append(all, keysOf[pre][sale]...)
				for _, n := range others {
					all = append(all, tag+n)
				}
			}
		}
		r.setKeys(all)
		if got := r.exist(all); len(got) != len(all) {
			t.Fatalf("%d keys set, %d there", len(all), len(got))
		}

		gone := map[string]bool{}
		for _, pre := range prefixes {
			eng := inventory.New(r.rdb, inventory.Options{Prefix: pre})
			var doomed []string
			for _, s := range purged {
				doomed = append(doomed, keysOf[pre][s]...)
			}
			n, err := eng.PurgeArchived(r.ctx, append(purged, "never")...)
			if err != nil || n != len(doomed) {
				t.Fatalf("prefix %q: purge removed %d keys (%v), want %d", pre, n, err, len(doomed))
			}
			for _, k := range doomed {
				gone[k] = true
			}
			var want []string
			for _, k := range all {
				if !gone[k] {
					want = append(want, k)
				}
			}
			if got := r.exist(all); !slices.Equal(got, want) {
				t.Fatalf("prefix %q: keys removed that are not of its sales %v: %v",
					pre, purged, missing(want, got))
			}
			if n, err := eng.PurgeArchived(r.ctx, purged...); err != nil || n != 0 {
				t.Fatalf("prefix %q: a second purge removed %d keys (%v)", pre, n, err)
			}
		}
	})
}

// missing returns those of want that got lacks.
func missing(want, got []string) []string {
	var out []string
	for _, k := range want {
		if !slices.Contains(got, k) {
			out = append(out, k)
		}
	}
	return out
}

// failScans fails every SCAN of the node whose address bad holds.
type failScans struct {
	addr string
	bad  *sync.Map // addr -> struct{}
}

var errScanRefused = errors.New("test: this node refuses SCAN")

func (f failScans) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failScans) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, bad := f.bad.Load(f.addr); bad && cmd.Name() == "scan" {
			cmd.SetErr(errScanRefused)
			return errScanRefused
		}
		return next(ctx, cmd)
	}
}

func (f failScans) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// On a cluster, the walk of one master fails: the PurgeError names exactly
// the sales of that master, whose keys are all still there, and the sales
// of the other masters are purged (each master walked for its own only).
// A purge once the master answers again removes what was left.
func TestAdvPurgeArchivedOneMasterFailsTheOthersArePurged(t *testing.T) {
	cc := cluster.Client()
	t.Cleanup(func() { _ = cc.Close() })
	bad := &sync.Map{}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(failScans{addr: n.Options().Addr, bad: bad}) })
	b := backend{name: "cluster", client: func(testing.TB) redis.UniversalClient { return cc }}
	r := newRig(t, b, inventory.Options{})

	// Sales spread over the masters, some of which are not purged.
	bySale := map[string]string{} // sale -> its master's address
	byMaster := map[string][]string{}
	var ids []string
	for i := range 24 {
		id := "m" + strconv.Itoa(i)
		m, err := cc.MasterForKey(r.ctx, r.key(id, "sale"))
		if err != nil {
			t.Fatal(err)
		}
		bySale[id] = m.Options().Addr
		byMaster[bySale[id]] = append(byMaster[bySale[id]], id)
		ids = append(ids, id)
	}
	if len(byMaster) < 2 {
		t.Fatalf("the sales are on %d master(s), want several", len(byMaster))
	}
	expiring := []string{"op:1", "ptoken:t", "tat:1:2", "stage:x:sale"}
	keysOf := func(id string) []string {
		var ks []string
		for _, n := range expiring {
			ks = append(ks, r.key(id, n))
		}
		return ks
	}
	var all []string
	for _, id := range ids {
		all = append(all, keysOf(id)...)
		all = append(all, r.key(id, "sale"))
	}
	r.setKeys(all)
	purge := ids[:18] // the last 6 are live
	failing := bySale[purge[0]]
	bad.Store(failing, struct{}{})

	n, err := r.eng.PurgeArchived(r.ctx, purge...)
	pe, ok := errors.AsType[*inventory.PurgeError](err)
	var want []string
	for _, id := range purge {
		if bySale[id] == failing {
			want = append(want, id)
		}
	}
	if !ok || !errors.Is(err, errScanRefused) || !slices.Equal(pe.Sales, want) {
		t.Fatalf("purge with master %s refusing SCAN: %v; want a PurgeError naming its sales %v", failing, err, want)
	}
	for _, id := range ids {
		left := r.exist(keysOf(id))
		kept := !slices.Contains(purge, id) || bySale[id] == failing
		if kept && len(left) != len(expiring) || !kept && len(left) != 0 {
			t.Fatalf("sale %s on %s (purged %v, failing %v): keys left %v",
				id, bySale[id], slices.Contains(purge, id), bySale[id] == failing, left)
		}
		if len(r.exist([]string{r.key(id, "sale")})) != 1 {
			t.Fatalf("sale %s: its sale key was removed", id)
		}
	}
	if removed := (len(purge) - len(want)) * len(expiring); n != removed {
		t.Fatalf("purge reported %d keys removed, want %d", n, removed)
	}

	bad.Delete(failing)
	if n, err := r.eng.PurgeArchived(r.ctx, purge...); err != nil || n != len(want)*len(expiring) {
		t.Fatalf("purge once the master answers: %d, %v; want %d", n, err, len(want)*len(expiring))
	}
	for _, id := range ids[18:] {
		if left := r.exist(keysOf(id)); len(left) != len(expiring) {
			t.Fatalf("live sale %s lost keys: %v left", id, left)
		}
	}
}
