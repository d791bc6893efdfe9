-- 016: the fleet's memory of its Redis nodes (degraded mode). Per node
-- (its cluster node id; '' for a single Redis) the run_id and master_replid
-- an instance last trusted: seen while it did not hold Redis back, or just
-- after a recovery made every master agree with the database. An instance,
-- a freshly started one too, holds Redis back from a node whose run_id is
-- not the trusted one (it restarted, maybe behind the database), or that
-- is a promoted master whose replication id is not the trusted one
-- (failover.Seller.OnConnect). No row for a node: nothing to compare its
-- run_id with.
CREATE TABLE redis_trust (
    node       TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL,
    replid     TEXT NOT NULL,
    trusted_at BIGINT NOT NULL, -- unix ms
    trusted_by TEXT NOT NULL    -- the instance that wrote it
);
