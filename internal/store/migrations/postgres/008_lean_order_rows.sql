-- 008: fewer index entries and no trigger per stored order (the order
-- consumer writes a journal row, an order and its lines for every buy).
--
-- order_items' foreign key to orders ran a trigger per line that locked
-- its order row (a write of that row's header, and WAL): orders are
-- written before their lines in the same transaction, and never deleted.
ALTER TABLE order_items DROP CONSTRAINT IF EXISTS order_items_order_id_fkey;
-- orders_sale_user (sale_id, user_id) serves every lookup by sale too.
DROP INDEX IF EXISTS orders_sale_id;
-- Nothing looks journal rows up by id; Store.Journal sorts a sale's rows
-- by it (found through the unique key), which needs no index of its own.
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_pkey;
