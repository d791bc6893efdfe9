-- 002: a sale's own rate limits, and the audit journal of operators' actions.

-- JSON object {"per_user": "5/s,burst=10", "per_ip": "off", ...}; '' : none.
ALTER TABLE sales ADD COLUMN rate_limits TEXT NOT NULL DEFAULT '';

-- One row per operator action that changed something (refused ones change
-- nothing and are only logged). The stock effect of each action is in the
-- journal too, through the sale's event stream; this says who asked.
CREATE TABLE admin_audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    action     TEXT NOT NULL,
    sale_id    TEXT NOT NULL DEFAULT '',
    target     TEXT NOT NULL DEFAULT '', -- a sku or an order id
    detail     TEXT NOT NULL DEFAULT '', -- JSON object
    remote     TEXT NOT NULL DEFAULT '',
    request_id TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX admin_audit_sale_id ON admin_audit (sale_id);
