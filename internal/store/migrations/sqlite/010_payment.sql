-- 010: the payment step (a sale's payment timeout, see inventory/pay.go).
-- sales.payment_timeout_ms: 0 for a sale without a payment step.
-- orders.payment_status: '' while the sale decides it (not_required for a
-- sale without a payment step; else awaiting, until pay_by = created_at +
-- the sale's timeout, or expired once cancelled), 'paid' or 'expired' once
-- a paid or expired event was applied; payment_ref and paid_at (unix ms)
-- of a paid order.
ALTER TABLE sales ADD COLUMN payment_timeout_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN payment_status TEXT NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN payment_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN paid_at INTEGER NOT NULL DEFAULT 0;
