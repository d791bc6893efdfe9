package pipeline

import (
	"hash/fnv"
	"slices"
	"time"
)

// News of the sales: what this process appended (Wake, Heard), which sales
// moved lately (Active), and which sales a round reads (due): all of a
// reader's sales when it has few, else the ones with news and a sweep of
// the rest (see Options.QuietEvery).

// Wake tells the consumer that an entry was appended to the sale's stream
// (a cancel or a restock after the sale ended): a sale that was drained is
// read again, and the reader reads at once (a lingering one included).
func (c *Consumer) Wake(saleID string) {
	if reader, _, _, ok := c.heard(saleID); ok {
		c.signal(reader)
	}
}

// Heard tells the consumer that an entry was appended to the sale's stream
// by a buy: like Wake, but a reader lingering after a round (Linger) is
// not cut short: the sale is read in its next round. Only a reader with
// nothing to read is woken, once per sale between two of its reads.
func (c *Consumer) Heard(saleID string) {
	reader, fresh, woken, ok := c.heard(saleID)
	switch {
	case ok && woken:
		// An idle sale (ended and drained, as this process's clock has
		// it, while Redis's still sold it) is woken as Wake does: its
		// reader may have no other sale to read, and waits for a signal
		// (or the next discovery) then, not for news.
		c.signal(reader)
	case ok && fresh:
		select {
		case c.news[reader] <- struct{}{}:
		default:
		}
	}
}

// heard marks the sale woken, active and dirty, and returns its reader,
// whether it was not dirty and whether it was idle; ok is false for a
// sale not known.
func (c *Consumer) heard(saleID string) (reader int, fresh, woken, ok bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.sales[saleID]
	if sl == nil {
		return 0, false, false, false
	}
	fresh, woken = !sl.dirty, sl.idle
	sl.idle = false
	sl.wakes++
	sl.active = now
	sl.dirty = true
	return sl.reader, fresh, woken, true
}

// Active returns the sales that moved lately, sorted: the ones a read
// returned entries of, or Wake or Heard named, within Options.QuietAfter.
// A sale not among them may still have moved: another process appended
// to its stream, and another consumer read it.
func (c *Consumer) Active() []string {
	now := time.Now()
	c.mu.Lock()
	var ids []string
	for id, sl := range c.sales {
		if !sl.idle && now.Sub(sl.active) < c.o.QuietAfter {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// reread has the next rounds read each sale's own pending list, then its
// new entries: a round that reads a pending list reads no new entries of
// the sale, so news this round was to read (dirty, see due) are kept.
func (c *Consumer) reread(sales []*sale) {
	c.mu.Lock()
	for _, sl := range sales {
		sl.own, sl.dirty = true, true
	}
	c.mu.Unlock()
}

// keepNews marks a sale dirty again whose round read nothing of it: what
// due cleared for that read is read in a later round.
func (c *Consumer) keepNews(sl *sale) {
	c.mu.Lock()
	sl.dirty = true
	c.mu.Unlock()
}

// quietAll: a reader with at most this many sales reads them all in every
// round, waiting for new entries in Redis (see Options.QuietEvery).
var quietAll = 64

// due returns the sales of a round, of a reader's sales (not idle): all of
// them when there are at most quietAll (next zero: the read may wait for
// new entries); else the ones with news (dirty: Wake or Heard named them
// since their last read), with entries of their own to read again, or no
// group yet, and, in a sweep (one every QuietEvery at most, the last
// began at swept), the others whose turn has come, up to QuietReads ×
// QuietEvery, the longest due first. Each sale's turn comes every
// max(QuietEvery, sales ÷ QuietReads per second), from its last read.
// sweeps says the round is a sweep; next is when the next one is due.
func (c *Consumer) due(sales []*sale, now, swept time.Time) (round []*sale, next time.Time, sweeps bool) {
	for _, sl := range sales {
		sl.swept = false
	}
	if len(sales) <= quietAll {
		return sales, time.Time{}, false
	}
	period := max(c.o.QuietEvery, time.Duration(len(sales))*time.Second/time.Duration(c.o.QuietReads))
	sweeps = !now.Before(swept.Add(c.o.QuietEvery))
	var ready []*sale
	c.mu.Lock()
	for _, sl := range sales {
		switch {
		case sl.own || !sl.ready:
			// Its pending list read again, or its group made: its news,
			// if any, are read once that is done.
			round = append(round, sl)
		case sl.dirty:
			sl.dirty = false
			sl.nextQuiet = now.Add(period)
			round = append(round, sl)
		case sl.recheck && !now.Before(sl.nextClaim):
			// A read of its news whose reply a dropped connection lost,
			// and which the client sent again (the second reply empty),
			// left the entries the first delivered in its own pending
			// list, unseen, with no news left to bring the sale into a
			// round: read it at its claim tick, as a reader of few sales
			// reads every sale (the claim re-reads its pending list).
			round = append(round, sl)
		case !sweeps:
		case sl.nextQuiet.IsZero():
			// Its first turn somewhere in the period, so that sales
			// first seen together are read apart.
			h := fnv.New32a()
			_, _ = h.Write([]byte(sl.id))
			sl.nextQuiet = now.Add(time.Duration(h.Sum32()%uint32(max(period/time.Millisecond, 1))) * time.Millisecond)
		case !now.Before(sl.nextQuiet):
			ready = append(ready, sl)
		}
	}
	c.mu.Unlock()
	if budget := max(1, int(float64(c.o.QuietReads)*c.o.QuietEvery.Seconds())); len(ready) > budget {
		slices.SortFunc(ready, func(a, b *sale) int { return a.nextQuiet.Compare(b.nextQuiet) })
		ready = ready[:budget]
	}
	for _, sl := range ready {
		sl.nextQuiet, sl.swept = now.Add(period), true
	}
	if sweeps {
		return append(round, ready...), now.Add(c.o.QuietEvery), true
	}
	return round, swept.Add(c.o.QuietEvery), false
}
