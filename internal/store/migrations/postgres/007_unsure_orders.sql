-- 006: buys an instance sent to Redis whose outcome it never learned (a
-- transport error after the request may have reached Redis): handed over
-- with the acknowledged orders when the database begins to sell. No buyer
-- was told of them, so the database does not count them; should one turn
-- up from the stream after all (Redis did run it), it is written cancelled
-- (voided), so that nothing the database sold meanwhile is sold twice.
CREATE TABLE unsure_orders (
    order_id   TEXT PRIMARY KEY,
    sale_id    TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    created_at BIGINT NOT NULL -- unix ms, when the instance sent it
);
CREATE INDEX unsure_orders_sale_id ON unsure_orders (sale_id);
