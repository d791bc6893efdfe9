-- 011: the directory of segmented sales (package segment): a sale whose hot
-- items sell from several segments keeps no row in sales itself; each of its
-- segments is an ordinary sale ("<sale>:<n>") and this table names them, in
-- the order that decides every buyer's home segment. It is what rebuilds a
-- segmented sale's directory in Redis, lists and reads the sale as one, and
-- what closing or archiving a sale walks to reach every segment.

CREATE TABLE sale_segments (
    sale_id    TEXT NOT NULL,
    position   INTEGER NOT NULL,
    segment_id TEXT NOT NULL UNIQUE,
    PRIMARY KEY (sale_id, position)
);
