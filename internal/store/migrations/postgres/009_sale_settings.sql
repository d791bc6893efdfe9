-- 009: a sale's service settings in one column the store does not read:
-- "settings" (was rate_limits) holds the service's encoded settings of the
-- sale, '' for none. The purchase-token flag, a column of its own until
-- now, goes into it: {"require_purchase_token":true, ...} (the rate limits'
-- JSON object written by 002 has the same keys the service reads now).
-- A column the old code read as no limits but never wrote ('{}', blanks)
-- is '' first: the service reads only '' or an object that sets something.
UPDATE sales SET rate_limits = '' WHERE trim(rate_limits) IN ('', '{}');
UPDATE sales SET rate_limits = CASE
        WHEN rate_limits = '' THEN '{"require_purchase_token":true}'
        ELSE rtrim(rtrim(rate_limits), '}') || ',"require_purchase_token":true}'
    END
    WHERE require_purchase_token <> 0;
ALTER TABLE sales RENAME COLUMN rate_limits TO settings;
ALTER TABLE sales DROP COLUMN require_purchase_token;
