-- 003: the journal of repairs. Reconciliation sets values of a sale in Redis
-- back to what the database says when the two drift apart (Redis lost
-- writes); every quantity it changed is a row here, with why.

CREATE TABLE repairs (
    id      INTEGER PRIMARY KEY, -- the rowid: grows with every insert
    sale_id TEXT NOT NULL,
    sku     TEXT NOT NULL DEFAULT '', -- '': a quantity of the whole sale
    field   TEXT NOT NULL,            -- remaining, stocked, sold, held, ... (inventory.RepairField)
    before  INTEGER NOT NULL,         -- the value in Redis before the repair
    after   INTEGER NOT NULL,         -- the value it was set to, the database's
    fixed   INTEGER NOT NULL DEFAULT 0, -- Redis fields written or removed for it
    reason  TEXT NOT NULL DEFAULT '',
    at      INTEGER NOT NULL
) STRICT;
CREATE INDEX repairs_sale_id ON repairs (sale_id);
