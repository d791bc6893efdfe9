-- 006: the stream id of the pause or resume event that set a sale's paused
-- flag ('' none: the flag is the sale's creation's). The order consumer
-- applies a crashed consumer's reclaimed entries after later ones; a pause
-- or resume older than this one changes nothing (see Store.Apply).

ALTER TABLE sales ADD COLUMN paused_event TEXT NOT NULL DEFAULT '';
