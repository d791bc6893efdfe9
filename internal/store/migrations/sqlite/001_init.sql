-- 001_init: the system of record of sales, orders and the stock journal.
-- Same tables and columns as the PostgreSQL migration; STRICT tables so a
-- value of the wrong type is refused, as PostgreSQL would.

CREATE TABLE sales (
    id                     TEXT PRIMARY KEY,
    per_user_limit         INTEGER NOT NULL,
    starts_at              INTEGER NOT NULL DEFAULT 0,
    ends_at                INTEGER NOT NULL DEFAULT 0,
    paused                 INTEGER NOT NULL DEFAULT 0,
    require_purchase_token INTEGER NOT NULL DEFAULT 0,
    created_at             INTEGER NOT NULL
) STRICT;

CREATE TABLE sale_items (
    sale_id       TEXT NOT NULL REFERENCES sales (id) ON DELETE CASCADE,
    sku           TEXT NOT NULL,
    position      INTEGER NOT NULL,
    initial_stock INTEGER NOT NULL, -- -1: unlimited
    stocked       INTEGER NOT NULL, -- initial + applied restocks; -1: unlimited
    PRIMARY KEY (sale_id, sku)
) STRICT, WITHOUT ROWID;

-- orders.sale_id is deliberately not a foreign key: events of a sale are
-- applied as they come, and an order never fails for want of its sale row.
CREATE TABLE orders (
    id              TEXT PRIMARY KEY,
    sale_id         TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('confirmed', 'cancelled')),
    idempotency_key TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    cancelled_at    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX orders_sale_id ON orders (sale_id);

CREATE TABLE order_items (
    order_id TEXT NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku      TEXT NOT NULL,
    qty      INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (order_id, sku)
) STRICT, WITHOUT ROWID;

-- The journal: one row per stock movement and sku. Its unique key makes
-- applying an event twice a no-op.
CREATE TABLE journal (
    id       INTEGER PRIMARY KEY, -- the rowid: grows with every insert
    sale_id  TEXT NOT NULL,
    event_id TEXT NOT NULL,
    type     TEXT NOT NULL,
    sku      TEXT NOT NULL DEFAULT '',
    order_id TEXT NOT NULL DEFAULT '',
    user_id  TEXT NOT NULL DEFAULT '',
    qty      INTEGER NOT NULL DEFAULT 0,
    at       INTEGER NOT NULL,
    UNIQUE (sale_id, event_id, sku)
) STRICT;

CREATE TABLE dead_letters (
    sale_id  TEXT NOT NULL,
    event_id TEXT NOT NULL,
    reason   TEXT NOT NULL,
    payload  TEXT NOT NULL, -- the stream entry's fields as a JSON object
    at       INTEGER NOT NULL,
    PRIMARY KEY (sale_id, event_id)
) STRICT;
