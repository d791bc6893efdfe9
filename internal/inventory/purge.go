package inventory

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Purging archived sales. Archive removes, in its script, every key of a
// sale that lives as long as the sale; the keys that expire on their own
// (their names are not known: an op:<id> per call, a ptoken:<token> per
// token spent, ...) are left to PurgeArchived, which finds them with SCAN.
// SCAN walks every key of a node whatever its MATCH, so its cost is the
// size of the keyspace, not the sale's: PurgeArchived takes any number of
// sales and walks each node once for all of them.

// expiringFamilies are the names of the sale's keys that expire on their
// own (see keys.go), as the start of the part after the sale's hash tag.
var expiringFamilies = []string{"op:", "ptoken:", "tat:", "throttle:", "stage:"}

// purgePage is how many keys a SCAN call looks at (its COUNT): Redis is
// never held for longer than a page.
const purgePage = 1000

// PurgeError says which sales of a PurgeArchived call may have keys left:
// those of a node whose walk failed (or whose node could not be named).
// The call's other sales are purged.
type PurgeError struct {
	Sales []string
	Err   error
}

func (e *PurgeError) Error() string {
	if len(e.Sales) == 1 {
		return fmt.Sprintf("seckill: purge sale %s: %v", e.Sales[0], e.Err)
	}
	return fmt.Sprintf("seckill: purge %d sales (%s, ...): %v", len(e.Sales), e.Sales[0], e.Err)
}

// Unwrap returns the error of Redis that stopped the purge.
func (e *PurgeError) Unwrap() error { return e.Err }

// purgeNode is what a purge needs of a node: *redis.Client has it.
type purgeNode interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipeline() redis.Pipeliner
}

// PurgeArchived removes what is left of archived sales: the keys of them
// that would expire on their own (op:*, ptoken:*, tat:*, throttle:*,
// stage:*), found with SCAN and removed with UNLINK, a page of 1,000 keys
// at a time, so that Redis is never held for long. Each node that holds
// any of the sales is walked once for all of them (on a Redis Cluster,
// each master only for the sales of its slots): purge the sales archived
// together in one call. Keys a caller keeps under a sale's tag (Key) with
// other names stay, and so does every key of a sale not named.
//
// Call it after Archive removed the sales; it returns how many keys it
// removed. An invalid sale id is ErrInvalid, and nothing is removed. A
// node that fails its walk is a *PurgeError naming the sales that may
// have keys left; the other nodes' are purged. A client that cannot SCAN
// (not a go-redis client) removes nothing: the keys expire.
func (e *Engine) PurgeArchived(ctx context.Context, saleIDs ...string) (int, error) {
	for _, id := range saleIDs {
		if err := validateID("sale", id); err != nil {
			return 0, err
		}
	}
	groups, failed, ferr := e.purgeGroups(ctx, saleIDs)
	removed := 0
	for _, g := range groups {
		n, err := e.purgeOn(ctx, g.node, g.tags)
		removed += n
		if err != nil {
			failed = append(failed, g.sales...)
			if ferr == nil {
				ferr = err
			}
		}
	}
	if len(failed) > 0 {
		return removed, &PurgeError{Sales: failed, Err: ferr}
	}
	return removed, nil
}

// purgeGroup is the sales of one node: their ids and hash tags.
type purgeGroup struct {
	node  purgeNode
	sales []string
	tags  map[string]struct{}
}

// purgeGroups groups the sales by the node that holds them: one group on
// a single node, one per master on a cluster (by the slot map: the
// master's address). Sales whose master cannot be named are failed, with
// the first such error.
func (e *Engine) purgeGroups(ctx context.Context, saleIDs []string) (groups []*purgeGroup, failed []string, err error) {
	one, single := e.rdb.(purgeNode)
	if len(saleIDs) == 0 || e.pipes.finder == nil && !single {
		return nil, nil, nil // nothing to do, or no SCAN: the keys expire
	}
	byNode := map[string]*purgeGroup{}
	for _, id := range saleIDs {
		k := e.keys(id)
		node, addr := one, ""
		if e.pipes.finder != nil {
			c, ferr := e.pipes.finder.MasterForKey(ctx, k.sale)
			if ferr != nil {
				failed = append(failed, id)
				if err == nil {
					err = ferr
				}
				continue
			}
			node, addr = c, c.Options().Addr
		}
		g := byNode[addr]
		if g == nil {
			g = &purgeGroup{node: node, tags: map[string]struct{}{}}
			byNode[addr] = g
			groups = append(groups, g)
		}
		if _, dup := g.tags[k.tag]; !dup {
			g.tags[k.tag] = struct{}{}
			g.sales = append(g.sales, id)
		}
	}
	return groups, failed, err
}

// purgeOn walks node's keyspace once and unlinks, a page at a time, the
// expiring keys of the sales whose hash tags are tags. SCAN's MATCH takes
// every key of the engine's prefix (a glob cannot name a set of sales);
// the tags are picked out here. A page's keys are unlinked one UNLINK per
// sale, pipelined: on a cluster, keys of different sales may be in
// different slots of the node, which one UNLINK refuses (CROSSSLOT).
func (e *Engine) purgeOn(ctx context.Context, node purgeNode, tags map[string]struct{}) (int, error) {
	open := "{" + e.prefix + ":"
	match := globEscape(open) + "*"
	removed := 0
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, match, purgePage).Result()
		if err != nil {
			return removed, err
		}
		doomed := map[string][]string{} // tag -> its keys on this page
		var order []string              // the tags, in the order met
		for _, key := range keys {
			tag, ok := expiringKeyTag(key, open, tags)
			if !ok {
				continue
			}
			if _, seen := doomed[tag]; !seen {
				order = append(order, tag)
			}
			doomed[tag] = append(doomed[tag], key)
		}
		if len(order) > 0 {
			p := node.Pipeline()
			cmds := make([]*redis.IntCmd, len(order))
			for i, tag := range order {
				cmds[i] = p.Unlink(ctx, doomed[tag]...)
			}
			_, err := p.Exec(ctx)
			for _, c := range cmds {
				removed += int(c.Val())
			}
			if err != nil {
				return removed, err
			}
		}
		if cursor = next; cursor == 0 {
			return removed, nil
		}
	}
}

// expiringKeyTag returns the hash tag of key ("{<prefix>:<sale>}") if key
// is one of the expiring keys (expiringFamilies) of a sale whose tag is in
// tags. open is "{<prefix>:". A sale id holds no "}", so the first one
// after open ends the tag, whatever the prefix holds: "{p:s1}:op:x" is
// not a key of sale "s10", nor "{p:s10}:op:x" one of "s1".
func expiringKeyTag(key, open string, tags map[string]struct{}) (string, bool) {
	if !strings.HasPrefix(key, open) {
		return "", false
	}
	end := strings.IndexByte(key[len(open):], '}')
	if end < 0 {
		return "", false
	}
	tag, rest := key[:len(open)+end+1], key[len(open)+end+1:]
	if _, ok := tags[tag]; !ok {
		return "", false
	}
	rest, ok := strings.CutPrefix(rest, ":")
	if !ok {
		return "", false
	}
	for _, f := range expiringFamilies {
		if strings.HasPrefix(rest, f) {
			return tag, true
		}
	}
	return "", false
}

// globEscape escapes the characters SCAN's MATCH pattern treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
