-- 013: each sale's orders counted by status and payment status, kept by
-- triggers on orders in the transaction that writes them. The live view
-- counts a selling sale's orders every second (Store.CountOrdersOf,
-- CountPaymentsOf); counted from orders, that read every order of the sale
-- each time, a cost per second that grew with the sale. Now it reads a
-- few rows. Every writer of orders is counted, whatever its path (the
-- consumer, degraded mode, a hand-over, an operator with psql), and a
-- rolled-back write takes its counts back with it.
--
-- A row's n may fall to 0 (its orders moved to another status); readers
-- skip those.
CREATE TABLE order_counts (
    sale_id        TEXT NOT NULL,
    status         TEXT NOT NULL,
    payment_status TEXT NOT NULL,
    n              BIGINT NOT NULL,
    PRIMARY KEY (sale_id, status, payment_status)
);

-- Writers of orders wait until this migration commits (and it for them),
-- so the counts below and the triggers' start from one state.
LOCK TABLE orders IN SHARE MODE;
INSERT INTO order_counts (sale_id, status, payment_status, n)
    SELECT sale_id, status, payment_status, COUNT(*) FROM orders GROUP BY sale_id, status, payment_status;

-- One upsert per statement that writes orders (not one per row): rows
-- counted in, rows counted out. Rows are taken in key order, so two
-- transactions lock the count rows they share in the same order.
CREATE FUNCTION order_counts_add() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO order_counts AS c (sale_id, status, payment_status, n)
            SELECT sale_id, status, payment_status, COUNT(*) FROM new_rows
            GROUP BY sale_id, status, payment_status ORDER BY 1, 2, 3
            ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO order_counts AS c (sale_id, status, payment_status, n)
            SELECT sale_id, status, payment_status, SUM(d) FROM (
                SELECT sale_id, status, payment_status, 1 AS d FROM new_rows
                UNION ALL
                SELECT sale_id, status, payment_status, -1 AS d FROM old_rows) m
            GROUP BY sale_id, status, payment_status HAVING SUM(d) <> 0 ORDER BY 1, 2, 3
            ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO order_counts AS c (sale_id, status, payment_status, n)
            SELECT sale_id, status, payment_status, -COUNT(*) FROM old_rows
            GROUP BY sale_id, status, payment_status ORDER BY 1, 2, 3
            ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = c.n + excluded.n;
    ELSE -- TRUNCATE
        DELETE FROM order_counts;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_counted_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION order_counts_add();
CREATE TRIGGER orders_counted_update AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION order_counts_add();
CREATE TRIGGER orders_counted_delete AFTER DELETE ON orders
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION order_counts_add();
CREATE TRIGGER orders_counted_truncate AFTER TRUNCATE ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION order_counts_add();
