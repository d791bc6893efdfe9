-- 012: archiving a sale that has ended (see store/archive.go). archiving_at
-- (unix ms, 0 not yet): the archiver found the sale ended and settled and
-- is removing its keys from Redis; from then on the service never rebuilds
-- it in Redis. archived_at (unix ms, 0 not yet): its keys are gone; the
-- order consumer no longer reads its stream, and the database alone
-- answers for it.
ALTER TABLE sales ADD COLUMN archiving_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sales ADD COLUMN archived_at INTEGER NOT NULL DEFAULT 0;
-- The archiver's look for candidates (Store.ArchiveCandidates) every few
-- seconds: sales not archived, and those archived lately.
CREATE INDEX sales_archived_at ON sales (archived_at);
