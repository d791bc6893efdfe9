-- 008: one index entry less per stored order: orders_sale_user
-- (sale_id, user_id) serves every lookup by sale too. (The foreign key of
-- order_items and the journal's id, its rowid, cost SQLite next to
-- nothing, and stay.)
DROP INDEX IF EXISTS orders_sale_id;
