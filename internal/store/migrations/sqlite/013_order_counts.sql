-- 013: each sale's orders counted by status and payment status, kept by
-- triggers on orders in the transaction that writes them (see the
-- PostgreSQL migration of the same number: the live view counts a selling
-- sale's orders every second). A row's n may fall to 0; readers skip those.
CREATE TABLE order_counts (
    sale_id        TEXT NOT NULL,
    status         TEXT NOT NULL,
    payment_status TEXT NOT NULL,
    n              INTEGER NOT NULL,
    PRIMARY KEY (sale_id, status, payment_status)
);

INSERT INTO order_counts (sale_id, status, payment_status, n)
    SELECT sale_id, status, payment_status, COUNT(*) FROM orders GROUP BY sale_id, status, payment_status;

CREATE TRIGGER orders_counted_insert AFTER INSERT ON orders BEGIN
    INSERT INTO order_counts (sale_id, status, payment_status, n) VALUES (new.sale_id, new.status, new.payment_status, 1)
        ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER orders_counted_update AFTER UPDATE OF sale_id, status, payment_status ON orders BEGIN
    INSERT INTO order_counts (sale_id, status, payment_status, n) VALUES (old.sale_id, old.status, old.payment_status, -1)
        ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = n - 1;
    INSERT INTO order_counts (sale_id, status, payment_status, n) VALUES (new.sale_id, new.status, new.payment_status, 1)
        ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER orders_counted_delete AFTER DELETE ON orders BEGIN
    INSERT INTO order_counts (sale_id, status, payment_status, n) VALUES (old.sale_id, old.status, old.payment_status, -1)
        ON CONFLICT (sale_id, status, payment_status) DO UPDATE SET n = n - 1;
END;
