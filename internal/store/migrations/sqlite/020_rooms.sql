-- 020: the waiting rooms of sales that have one (the service's admission):
-- a row per such sale, written with the sale and kept as long as it (after
-- its archive too, so that its draw stays published). secret: 64 hex
-- characters, revealed only by the draw; commitment: SHA-256 of it,
-- published at once. rate_per_s: the room's admission rate now (0:
-- automatic), what a room Redis lost is made again with. draw: the draw's
-- published record (JSON), '' until the draw ran; drawn_at: unix ms.
CREATE TABLE rooms (
    sale_id    TEXT PRIMARY KEY REFERENCES sales (id) ON DELETE CASCADE,
    secret     TEXT NOT NULL,
    commitment TEXT NOT NULL,
    rate_per_s INTEGER NOT NULL DEFAULT 0,
    draw       TEXT NOT NULL DEFAULT '',
    drawn_at   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
) STRICT;
