package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
)

var (
	//go:embed close.lua
	closeSrc string
	//go:embed archive.lua
	archiveSrc string

	closeScript   = luascript.New("close", gcra.ClockLua+"\n"+intSrc+"\n"+closeSrc)
	archiveScript = luascript.New("archive", gcra.ClockLua+"\n"+settledSrc+"\n"+archiveSrc)
)

// archivedMarkTTL is how long archive.lua's mark stays after it removed a
// sale: a rebuild that read its snapshot before the removal and commits
// within this time is refused (commit.lua). It outlasts any pause of a
// rebuilder but a freeze of the process for longer than it.
const archivedMarkTTL = time.Hour

// Outcome codes of close.lua and archive.lua (the rest are engine.go's).
const (
	codeCloseFenced   = 16 // close.lua: the database sells the sale
	codeArchiveNotYet = 17 // archive.lua: not ended, rebuilding, awaiting, stray
	codeArchived      = 18 // commit.lua: archived since the snapshot was read
)

// ArchivedError: the sale has ended and its keys are removed from Redis, or
// are being removed: only the system of record answers for it, and the
// engine never rebuilds it (a Loader returns it to refuse a rebuild). It
// unwraps to a *NotActiveError of StatusEnded, so it matches
// ErrSaleNotActive.
type ArchivedError struct{ SaleID string }

func (e *ArchivedError) Error() string {
	return "seckill: sale " + e.SaleID + " has ended and is archived"
}

// Unwrap returns the sale's NotActiveError: ended.
func (e *ArchivedError) Unwrap() error { return &NotActiveError{Status: StatusEnded} }

// Close ends a sale now, by the Redis server's clock: from then on every
// buy of it fails with ErrSaleNotActive, on every instance, as at its own
// end; a closed event reaches the system of record through the sale's
// stream. A sale closed before its start gets a start just below its end.
// Closing a sale that has ended already changes nothing. It returns the
// sale's window as it is now. A sale the database sells (fenced off in
// Redis, degraded mode) is ErrFenced.
func (e *Engine) Close(ctx context.Context, saleID string) (startsAt, endsAt time.Time, err error) {
	if err := validateID("sale", saleID); err != nil {
		return time.Time{}, time.Time{}, err
	}
	k := e.keys(saleID)
	reply, err := e.runSale(ctx, saleID, closeScript, []string{k.sale, k.events}, e.scriptNow())
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	switch code(reply) {
	case codeOK:
		start, ok1 := at(reply, 1).(int64)
		end, ok2 := at(reply, 2).(int64)
		if ok1 && ok2 {
			return fromUnixMs(start), fromUnixMs(end), nil
		}
	case codeCloseFenced:
		return time.Time{}, time.Time{}, fmt.Errorf("%w: sale %s", ErrFenced, saleID)
	}
	return time.Time{}, time.Time{}, unexpected(closeScript, reply)
}

// ArchiveCheck says whether a sale's keys may be removed from Redis: Ready
// with the stream's last generated id (Last, "0-0" for no stream) when the
// sale has ended by the Redis server's clock, no rebuild of it is under way,
// no payment of it is awaiting and every event of its stream is delivered
// and acknowledged; Gone when its sale hash is not in Redis; otherwise
// Reason says what it waits for.
type ArchiveCheck struct {
	Ready, Gone bool
	Last        string
	Reason      string
}

// CheckArchive looks at the sale (archive.lua, removing nothing). It
// never rebuilds a missing sale.
func (e *Engine) CheckArchive(ctx context.Context, saleID string) (ArchiveCheck, error) {
	return e.archive(ctx, saleID, "")
}

// Archive removes the sale's keys from Redis, in one script, if it is
// still as CheckArchive found it: ended, nothing awaiting, no rebuild, and
// its stream settled at last, the id the system of record confirmed it
// holds. Otherwise nothing is removed and the check says why (a late
// cancel moved the stream, say): look again later. A sale whose hash is
// gone already has any keys left of it removed (Gone): pass last "-" for
// such a sale. Keys that expire
// on their own (op:*, ptoken:*, tat:*) are left to expire. The caller
// marks the sale archived in the system of record first, and its Loader
// then refuses to rebuild it (ArchivedError).
func (e *Engine) Archive(ctx context.Context, saleID, last string) (ArchiveCheck, error) {
	if last == "" {
		return ArchiveCheck{}, invalid("last", "must be the stream id the check returned")
	}
	return e.archive(ctx, saleID, last)
}

func (e *Engine) archive(ctx context.Context, saleID, last string) (ArchiveCheck, error) {
	if err := validateID("sale", saleID); err != nil {
		return ArchiveCheck{}, err
	}
	reply, err := e.run.run(ctx, archiveScript, e.keys(saleID).archived(), e.scriptNow(), last, archivedMarkTTL.Milliseconds())
	if err != nil {
		return ArchiveCheck{}, err
	}
	switch code(reply) {
	case codeOK:
		return ArchiveCheck{Ready: true, Last: str(at(reply, 1))}, nil
	case codeReplay:
		return ArchiveCheck{Gone: true}, nil
	case codeArchiveNotYet:
		return ArchiveCheck{Reason: str(at(reply, 1))}, nil
	case codeRepairMoved:
		return ArchiveCheck{Reason: "stream moved to " + str(at(reply, 1))}, nil
	case codeRepairInFlight:
		return ArchiveCheck{Reason: "events in flight"}, nil
	}
	return ArchiveCheck{}, unexpected(archiveScript, reply)
}
