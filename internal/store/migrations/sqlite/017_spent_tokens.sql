-- 017: the single-use tokens (purchase tokens) accepted buys spent, as
-- long as each can still be presented: a row per order that spent one,
-- written with the order by the order consumer (from its stream entry).
-- A sale Redis lost is rebuilt, or repaired, with the tokens of its orders
-- still spent, as its orders are kept. Orders without a token have no row:
-- the consumer writes nothing more for them.
CREATE TABLE spent_tokens (
    sale_id    TEXT NOT NULL,
    token      TEXT NOT NULL,
    user_id    TEXT NOT NULL,    -- the buyer who spent it
    order_id   TEXT NOT NULL,    -- the order it bought
    expires_at INTEGER NOT NULL, -- unix ms: spent until then, its life over after
    PRIMARY KEY (sale_id, token)
) STRICT;
