-- 019: the Redis key prefix the database belongs to. The database is the
-- record of the sales; a key prefix only names their copies in Redis. Two
-- prefixes on one database would each rebuild its sales under their own
-- keys and sell each unit once per prefix, so the first service that
-- starts on the database records its prefix here (one row, never changed)
-- and a service of another prefix refuses to start (Store.ClaimKeyPrefix).
-- A database of an older release has no row: it belongs to the first
-- prefix that starts on it after the upgrade.

CREATE TABLE key_prefix (
    id         SMALLINT PRIMARY KEY CHECK (id = 1),
    prefix     TEXT NOT NULL,
    claimed_at BIGINT NOT NULL -- unix ms
);
