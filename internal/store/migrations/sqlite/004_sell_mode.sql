-- 004: who sells, Redis or the database (degraded mode). One row, read by
-- every instance each tick and by every buy made on the database. epoch
-- grows with every change of mode: a database buy checks, in its own
-- transaction, that the mode is still the one it was routed by.

CREATE TABLE sell_mode (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    setting    TEXT NOT NULL DEFAULT 'auto' CHECK (setting IN ('auto', 'force', 'off')),
    mode       TEXT NOT NULL DEFAULT 'redis' CHECK (mode IN ('redis', 'db', 'recovering')),
    epoch      INTEGER NOT NULL DEFAULT 0,
    changed_at INTEGER NOT NULL DEFAULT 0, -- unix ms
    sells_from INTEGER NOT NULL DEFAULT 0, -- mode db: database buys are taken from then on (unix ms)
    reason     TEXT NOT NULL DEFAULT ''
) STRICT;
INSERT INTO sell_mode (id) VALUES (1);

-- Every running instance, as of its last tick: whether it reached Redis,
-- up to which degraded epoch it has handed the database the orders it
-- acknowledged from Redis, and its order consumer (whose pending entries
-- the others take over at once when it stops ticking).
CREATE TABLE instances (
    name          TEXT PRIMARY KEY,
    seen_at       INTEGER NOT NULL, -- unix ms
    redis_ok_at   INTEGER NOT NULL DEFAULT 0,
    flushed_epoch INTEGER NOT NULL DEFAULT 0,
    consumer      TEXT NOT NULL DEFAULT '' -- its order consumer's name in the stream groups
) STRICT;

-- Units sold of each item as a degraded-mode buy last counted them: one
-- sum over the sale's orders per degraded epoch instead of one per buy.
-- Anything else that writes the sale's orders (the consumer, a hand-over)
-- deletes the sale's rows, and the next buy counts again.
CREATE TABLE degraded_stock (
    sale_id TEXT NOT NULL,
    sku     TEXT NOT NULL,
    epoch   INTEGER NOT NULL,
    sold    INTEGER NOT NULL,
    PRIMARY KEY (sale_id, sku)
) STRICT;

-- The per-user limit check of a degraded-mode buy.
CREATE INDEX orders_sale_user ON orders (sale_id, user_id);
CREATE INDEX instances_consumer ON instances (consumer);
