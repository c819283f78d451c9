-- Schema 1: the records of the journal-backed stores, one chain per store.
CREATE TABLE akritas_records (
    store text NOT NULL,
    seq bigint NOT NULL,
    time text NOT NULL,
    kind text NOT NULL,
    -- The payload exactly as hashed (JSON text, not jsonb, so the hash can be checked).
    data text NOT NULL,
    prev text NOT NULL,
    hash text NOT NULL,
    -- The keyed seal (HMAC-SHA256 of the hash) when the store is keyed.
    mac text,
    PRIMARY KEY (store, seq)
);

-- The last record of each store's chain, and its anchor: the last record deleted (by a
-- snapshot or retention), which the first kept record must follow. Writers lock this row: one
-- decision at a time per store, across every replica.
CREATE TABLE akritas_heads (
    store text PRIMARY KEY,
    seq bigint NOT NULL,
    hash text NOT NULL,
    anchor_seq bigint NOT NULL DEFAULT 0,
    anchor_hash text NOT NULL
);

-- The newest snapshot of each store: its state as of record `seq`. The records up to it are
-- deleted when it is written.
CREATE TABLE akritas_snapshots (
    store text PRIMARY KEY,
    seq bigint NOT NULL,
    hash text NOT NULL,
    format text NOT NULL,
    data text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
