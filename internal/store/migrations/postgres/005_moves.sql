-- 005: the moves of units between sales (the segments of a hot item, see
-- inventory.Engine.Move), one row per half applied: units < 0 left sale_id
-- for peer, units > 0 came into sale_id from peer. A sale rebuilt from the
-- database gets its records back (inventory.Snapshot.Moves); a move out is
-- arrived once its peer has the row of the in half.

CREATE TABLE moves (
    sale_id TEXT NOT NULL,
    move_id TEXT NOT NULL,
    peer    TEXT NOT NULL,
    sku     TEXT NOT NULL,
    units   BIGINT NOT NULL,
    PRIMARY KEY (sale_id, move_id)
);
