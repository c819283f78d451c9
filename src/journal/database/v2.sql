-- Schema 2: reads by what a record is about (the audit's Run id) and by kind (the newest Runs,
-- the counts by status), without reading the store's whole chain.
ALTER TABLE akritas_records ADD COLUMN key text;
CREATE INDEX akritas_records_by_key ON akritas_records (store, key, seq) WHERE key IS NOT NULL;
CREATE INDEX akritas_records_by_kind ON akritas_records (store, kind, seq);

-- The replicas sharing the database and when each last said it is alive: a Run or a claim of a
-- replica whose heartbeat is older than the lease belongs to a replica that stopped.
CREATE TABLE akritas_replicas (
    id text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
