-- 018: the out halves of moves between a sale's segments (see 005) whose
-- outcome an instance never learned (a reply lost), handed over with its
-- acknowledged orders and moves when the database begins to sell. Such a
-- half may have taken up to -units units out of sale_id for peer: the
-- database does not sell them until its moved event arrives (a row in
-- moves) or the recovery has drained the stream, which forgets them.

CREATE TABLE unsure_moves (
    sale_id TEXT NOT NULL,
    move_id TEXT NOT NULL,
    peer    TEXT NOT NULL,
    sku     TEXT NOT NULL,
    units   BIGINT NOT NULL,
    PRIMARY KEY (sale_id, move_id)
);
