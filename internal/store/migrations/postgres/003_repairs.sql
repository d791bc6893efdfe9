-- 003: the journal of repairs. Reconciliation sets values of a sale in Redis
-- back to what the database says when the two drift apart (Redis lost
-- writes); every quantity it changed is a row here, with why.

CREATE TABLE repairs (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sale_id TEXT NOT NULL,
    sku     TEXT NOT NULL DEFAULT '', -- '': a quantity of the whole sale
    field   TEXT NOT NULL,            -- remaining, stocked, sold, held, ... (inventory.RepairField)
    before  BIGINT NOT NULL,          -- the value in Redis before the repair
    after   BIGINT NOT NULL,          -- the value it was set to, the database's
    fixed   BIGINT NOT NULL DEFAULT 0, -- Redis fields written or removed for it
    reason  TEXT NOT NULL DEFAULT '',
    at      BIGINT NOT NULL
);
CREATE INDEX repairs_sale_id ON repairs (sale_id);
