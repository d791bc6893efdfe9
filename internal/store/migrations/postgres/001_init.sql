-- 001_init: the system of record of sales, orders and the stock journal.
-- Times are unix milliseconds (0: none), flags 0/1, so that both dialects scan alike.

CREATE TABLE sales (
    id                     TEXT PRIMARY KEY,
    per_user_limit         BIGINT NOT NULL,
    starts_at              BIGINT NOT NULL DEFAULT 0,
    ends_at                BIGINT NOT NULL DEFAULT 0,
    paused                 SMALLINT NOT NULL DEFAULT 0,
    require_purchase_token SMALLINT NOT NULL DEFAULT 0,
    created_at             BIGINT NOT NULL
);

CREATE TABLE sale_items (
    sale_id       TEXT NOT NULL REFERENCES sales (id) ON DELETE CASCADE,
    sku           TEXT NOT NULL,
    position      INTEGER NOT NULL,
    initial_stock BIGINT NOT NULL, -- -1: unlimited
    stocked       BIGINT NOT NULL, -- initial + applied restocks; -1: unlimited
    PRIMARY KEY (sale_id, sku)
);

-- orders.sale_id is deliberately not a foreign key: events of a sale are
-- applied as they come, and an order never fails for want of its sale row.
CREATE TABLE orders (
    id              TEXT PRIMARY KEY,
    sale_id         TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('confirmed', 'cancelled')),
    idempotency_key TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    cancelled_at    BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX orders_sale_id ON orders (sale_id);

CREATE TABLE order_items (
    order_id TEXT NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku      TEXT NOT NULL,
    qty      BIGINT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (order_id, sku)
);

-- The journal: one row per stock movement and sku. Its unique key makes
-- applying an event twice a no-op.
CREATE TABLE journal (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sale_id  TEXT NOT NULL,
    event_id TEXT NOT NULL,
    type     TEXT NOT NULL,
    sku      TEXT NOT NULL DEFAULT '',
    order_id TEXT NOT NULL DEFAULT '',
    user_id  TEXT NOT NULL DEFAULT '',
    qty      BIGINT NOT NULL DEFAULT 0,
    at       BIGINT NOT NULL,
    UNIQUE (sale_id, event_id, sku)
);

CREATE TABLE dead_letters (
    sale_id  TEXT NOT NULL,
    event_id TEXT NOT NULL,
    reason   TEXT NOT NULL,
    payload  TEXT NOT NULL, -- the stream entry's fields as a JSON object
    at       BIGINT NOT NULL,
    PRIMARY KEY (sale_id, event_id)
);
