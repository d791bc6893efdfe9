package inventory

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A single-use token (BuyRequest.Token) is spent by the accepted buy that
// presents it, in buy.lua, with a mark under the sale's tag
// ("ptoken:<token>", keys.go) that lives as long as the token can be
// presented (BuyRequest.TokenTTL). The mark alone would not outlive a loss
// of Redis's data, which the orders survive: so the token also travels with
// its order. The buy's stream entry names it (field "tokens", one line
// "<order id>|<token>|<until, unix ms>" per order of the entry that spent
// one; an entry without a token buy has no such field, and a buy without
// a token pays nothing for it), the order consumer hands it to the system
// of record with the order (Event.Spent), and a sale rebuilt or repaired
// from the system of record (Snapshot.SpentTokens) gets the marks back of
// the tokens whose life is not over. Whatever single-use credential a buy
// must spend once, across any loss of Redis's data, goes this way as its
// BuyRequest.Token.

// SpentToken is a single-use token an accepted buy spent
// (BuyRequest.Token): no buy of the sale is accepted with it again before
// Until, when its life (BuyRequest.TokenTTL) is over.
type SpentToken struct {
	Token   string
	UserID  string // the buyer who spent it
	OrderID string // the order it bought
	Until   time.Time
}

// fieldTokens is the field of a stream entry of bought orders that names
// the tokens its orders spent (see above).
const fieldTokens = "tokens"

// attachSpent sets Event.Spent of each of events (the bought events of
// msg, an entry of bought orders) whose order msg says spent a token. An
// entry of one field has none: that is the usual case, and costs nothing
// more than the length of its fields.
func attachSpent(events []Event, msg redis.XMessage) error {
	if len(msg.Values) < 2 {
		return nil
	}
	v, ok := msg.Values[fieldTokens].(string)
	if !ok {
		return nil
	}
	for line := range strings.SplitSeq(v, "\n") {
		parts := strings.Split(line, "|")
		var until int64
		var err error
		if len(parts) == 3 {
			until, err = strconv.ParseInt(parts[2], 10, 64)
		}
		if len(parts) != 3 || err != nil || !ValidID(parts[1]) {
			return fmt.Errorf("%w: entry %s: tokens %q", ErrCorrupt, msg.ID, truncate(v, 200))
		}
		for i := range events {
			if events[i].Order.ID == parts[0] {
				events[i].Spent = SpentToken{Token: parts[1], UserID: events[i].Order.UserID, OrderID: parts[0], Until: time.UnixMilli(until).UTC()}
			}
		}
	}
	return nil
}

// stagedSpent is how a rebuild stages a spent token's mark and a repair
// sends it (commit.lua and repair.lua take it): "<user>|<until, unix ms>".
func stagedSpent(t SpentToken) string {
	return t.UserID + "|" + strconv.FormatInt(t.Until.UnixMilli(), 10)
}

// spentFields are the field/value pairs of the staged spent tokens: token,
// stagedSpent.
func (st saleState) spentFields() []any {
	out := make([]any, 0, 2*len(st.spent))
	for _, t := range st.spent {
		out = append(out, t.Token, stagedSpent(t))
	}
	return out
}

// validSpent checks a spent token of a snapshot.
func validSpent(t SpentToken) error {
	if err := validateID("token", t.Token); err != nil {
		return err
	}
	return validateID("user", t.UserID)
}

// opSpent is repair.lua's op of a spent token's mark.
const opSpent = 7

// spentRepair returns repair.lua's ops that mark spent the tokens of want
// whose mark Redis lacks, and the change they make. A repair only ever
// adds marks: a token spent is never unspent, and one whose life is over
// expires (or was never set: PXAT in the past).
func (e *Engine) spentRepair(ctx context.Context, k saleKeys, want []SpentToken) ([]any, RepairChange, error) {
	var ops []any
	held := 0
	for chunk := range slices.Chunk(want, 1000) {
		keys := make([]string, len(chunk))
		for i, t := range chunk {
			keys[i] = k.token + t.Token
		}
		p := e.rdb.Pipeline()
		cmd := p.MGet(ctx, keys...)
		if _, err := p.Exec(ctx); err != nil {
			return nil, RepairChange{}, fmt.Errorf("seckill: read spent tokens: %w", err)
		}
		for i, v := range cmd.Val() {
			if v != nil {
				held++
				continue
			}
			ops = append(ops, opSpent, chunk[i].Token, "", stagedSpent(chunk[i]))
		}
	}
	return ops, RepairChange{Field: RepairSpentTokens, Before: int64(held), After: int64(len(want)), Fixed: len(ops) / 4}, nil
}
