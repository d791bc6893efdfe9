-- 014: an order of one line (nearly every order: a flash-sale buy is one
-- item) carries that line in its own row, and has no row in order_items:
-- a heap row, an index entry and ~200 bytes of WAL fewer per stored order
-- (see docs/performance.md, "Storing an order in PostgreSQL").
--
-- orders.sku '' : the order's lines are in order_items, one row each (an
-- order of several lines, and every order stored before this migration,
-- which stay as they are: nothing is rewritten). Otherwise the order has
-- exactly one line, sku × qty, and order_items holds none of it. Readers
-- of lines read both (store.orderLines).
--
-- Adding a column with a constant default rewrites no row.
ALTER TABLE orders ADD COLUMN sku TEXT NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN qty BIGINT NOT NULL DEFAULT 0;
