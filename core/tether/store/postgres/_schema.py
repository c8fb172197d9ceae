"""The PostgreSQL store's schema and its migrations (``tether.store.postgres``); rows become records in
``tether.store._rows``.

The schema is versioned: ``tether_schema_migrations`` holds one row per migration applied. Opening a store
takes a transaction-scoped advisory lock (so that many processes opening the same database at once apply each
migration once), applies the migrations the database lacks, in order, and refuses a database written by a
newer tether. A new schema version is a new entry in ``MIGRATIONS``, never a change to an old one.

Tables are prefixed ``tether_`` so that the store can live in a database that holds other things. JSON values
(inputs, outputs, metadata, span attributes, resources) are orjson bytes in ``bytea`` columns, as in the
SQLite store: written and read back byte for byte, with no server-side parse. Times are seconds since the
epoch (``double precision``), taken by the client, as in the other backends.
"""

from __future__ import annotations

from typing import Any

from tether.store.errors import StoreError

#: the channel a committed change of a rollout to a finished status is announced on (payload: its id)
FINISHED_CHANNEL = "tether_rollout_finished"

_V1 = f"""
CREATE SEQUENCE tether_queue_pos;
CREATE TABLE tether_rollouts (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rollout_id text NOT NULL UNIQUE,
    input bytea NOT NULL,
    task_id text NOT NULL,
    mode text NOT NULL,
    status text NOT NULL,
    metadata bytea NOT NULL,
    max_attempts bigint NOT NULL,
    timeout_s double precision,
    heartbeat_timeout_s double precision,
    resources_version bigint,
    attempt_count bigint NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    finished_at double precision,
    output bytea,
    reward double precision,
    error text,
    queue_pos bigint DEFAULT nextval('tether_queue_pos')
);
CREATE INDEX tether_rollouts_queue ON tether_rollouts (queue_pos) WHERE queue_pos IS NOT NULL;
CREATE INDEX tether_rollouts_status ON tether_rollouts (status, seq);
CREATE TABLE tether_attempts (
    attempt_id text PRIMARY KEY,
    rollout_id text NOT NULL,
    idx bigint NOT NULL,
    worker_id text NOT NULL,
    status text NOT NULL,
    started_at double precision NOT NULL,
    last_heartbeat_at double precision NOT NULL,
    finished_at double precision,
    error text,
    next_seq bigint NOT NULL DEFAULT 0
);
CREATE INDEX tether_attempts_rollout ON tether_attempts (rollout_id, idx);
CREATE INDEX tether_attempts_running ON tether_attempts (started_at) WHERE status = 'running';
CREATE TABLE tether_spans (
    attempt_id text NOT NULL,
    sequence bigint NOT NULL,
    rollout_id text NOT NULL,
    span_id text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    agent_name text,
    parent_id text,
    start_time double precision NOT NULL,
    end_time double precision,
    attributes bytea NOT NULL,
    PRIMARY KEY (attempt_id, sequence)
);
CREATE TABLE tether_resources (version bigint PRIMARY KEY, data bytea NOT NULL);
CREATE FUNCTION tether_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{FINISHED_CHANNEL}', NEW.rollout_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER tether_rollout_finished AFTER UPDATE OF status ON tether_rollouts FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION tether_notify_finished();
"""

#: the SQLSTATEs ``tether_finish_attempt`` raises: an unknown attempt, and one that is not running (its status
#: is the message)
UNKNOWN_ATTEMPT, NOT_RUNNING, WRONG_ROLLOUT = "TT404", "TT409", "TT422"

#: what the dashboard's pages read (``tether.store.rollout_query``): rollouts by reward, by task, and by mode;
#: and ``finish_attempt`` as one statement (one round trip instead of six: ``BEGIN``, lock the rollout, read
#: the attempt's status after the lock, end the attempt, settle the rollout, ``COMMIT``), the same steps
#: in the same order. Each statement of a PL/pgSQL function takes a new snapshot: the status read after the
#: lock sees what was committed while it waited, as it did from the client.
_V2 = f"""
CREATE INDEX tether_rollouts_reward ON tether_rollouts (reward, seq);
CREATE INDEX tether_rollouts_task ON tether_rollouts (task_id, seq);
CREATE INDEX tether_rollouts_mode ON tether_rollouts (mode, status, seq);
CREATE FUNCTION tether_finish_attempt(
    p_attempt text, p_status text, p_output bytea, p_reward double precision, p_error text,
    p_now double precision
) RETURNS SETOF tether_rollouts LANGUAGE plpgsql AS $$
DECLARE
    rid text;
    current text;
BEGIN
    SELECT rollout_id INTO rid FROM tether_rollouts
        WHERE rollout_id = (SELECT rollout_id FROM tether_attempts WHERE attempt_id = p_attempt) FOR UPDATE;
    IF rid IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '{UNKNOWN_ATTEMPT}', MESSAGE = 'unknown attempt';
    END IF;
    SELECT status INTO current FROM tether_attempts WHERE attempt_id = p_attempt;
    IF current <> 'running' THEN
        RAISE EXCEPTION USING ERRCODE = '{NOT_RUNNING}', MESSAGE = current;
    END IF;
    UPDATE tether_attempts SET status = p_status, finished_at = p_now, error = p_error
        WHERE attempt_id = p_attempt;
    IF p_status = 'succeeded' THEN
        RETURN QUERY UPDATE tether_rollouts SET status = 'succeeded', output = p_output, reward = p_reward,
            error = NULL, finished_at = p_now WHERE rollout_id = rid RETURNING *;
    ELSE
        RETURN QUERY UPDATE tether_rollouts SET
            queue_pos = CASE WHEN attempt_count < max_attempts THEN nextval('tether_queue_pos') END,
            status = CASE WHEN attempt_count < max_attempts THEN 'queued' ELSE 'failed' END,
            output = CASE WHEN attempt_count < max_attempts THEN output ELSE p_output END,
            reward = CASE WHEN attempt_count < max_attempts THEN reward ELSE p_reward END,
            finished_at = CASE WHEN attempt_count < max_attempts THEN NULL ELSE p_now END,
            error = p_error
            WHERE rollout_id = rid RETURNING *;
    END IF;
END
$$;
CREATE FUNCTION tether_add_spans(
    p_attempts text[], p_counts bigint[], p_now double precision,
    s_attempt text[], s_rollout text[], s_span text[], s_kind text[], s_name text[], s_agent text[],
    s_parent text[], s_start double precision[], s_end double precision[], s_attributes bytea[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    b_ids text[];
    b_owner text[];
    b_base bigint[];
    b_status text[];
    b_error text[];
    bad record;
    seqs bigint[];
BEGIN
    -- each attempt's numbers are taken by bumping next_seq (which locks the attempt: concurrent batches of
    -- one attempt get consecutive numbers); a span is a running attempt's heartbeat
    WITH bumped AS (
        UPDATE tether_attempts a SET next_seq = a.next_seq + c.n, last_heartbeat_at =
            CASE WHEN a.status = 'running' THEN p_now ELSE a.last_heartbeat_at END
        FROM unnest(p_attempts, p_counts) AS c(attempt_id, n) WHERE a.attempt_id = c.attempt_id
        RETURNING a.attempt_id, a.rollout_id, a.next_seq - c.n AS base, a.status, a.error
    )
    SELECT array_agg(attempt_id), array_agg(rollout_id), array_agg(base), array_agg(status), array_agg(error)
        INTO b_ids, b_owner, b_base, b_status, b_error FROM bumped;
    SELECT s.ord, s.rid, b.owner, b.status, b.error INTO bad
        FROM unnest(s_attempt, s_rollout) WITH ORDINALITY AS s(aid, rid, ord)
        LEFT JOIN unnest(b_ids, b_owner, b_status, b_error) AS b(aid, owner, status, error) ON b.aid = s.aid
        WHERE b.aid IS NULL OR b.owner <> s.rid OR b.status = 'timeout' ORDER BY s.ord LIMIT 1;
    IF FOUND THEN
        IF bad.owner IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '{UNKNOWN_ATTEMPT}', MESSAGE = 'unknown attempt', DETAIL = bad.ord;
        ELSIF bad.owner <> bad.rid THEN
            RAISE EXCEPTION USING ERRCODE = '{WRONG_ROLLOUT}', MESSAGE = 'another rollout', DETAIL = bad.ord,
                HINT = bad.owner;
        ELSE
            RAISE EXCEPTION USING ERRCODE = '{NOT_RUNNING}', MESSAGE = 'timed out', DETAIL = bad.ord,
                HINT = coalesce(bad.error, '');
        END IF;
    END IF;
    SELECT array_agg(seq ORDER BY ord) INTO seqs FROM (
        SELECT s.ord, b.base + row_number() OVER (PARTITION BY s.aid ORDER BY s.ord) - 1 AS seq
        FROM unnest(s_attempt) WITH ORDINALITY AS s(aid, ord)
        JOIN unnest(b_ids, b_base) AS b(aid, base) ON b.aid = s.aid
    ) numbered;
    INSERT INTO tether_spans (attempt_id, sequence, rollout_id, span_id, kind, name, agent_name, parent_id,
        start_time, end_time, attributes)
    SELECT * FROM unnest(s_attempt, seqs, s_rollout, s_span, s_kind, s_name, s_agent, s_parent, s_start, s_end,
        s_attributes);
    RETURN seqs;
END
$$;
"""

#: JSON values above ~2 KB (an LLM span's attributes: ~5 KB) are compressed when written. PostgreSQL's
#: default, pglz, made that most of a span write's cost (16 LLM spans: 3.1 ms of pglz against 0.65 ms with
#: lz4, the same size on disk); lz4 applies to values written from now on. A server built without lz4 (or
#: older than PostgreSQL 14, which has no per-column compression) keeps pglz: the store works the same.
_V3 = """
DO $$
DECLARE
    col text;
BEGIN
    FOREACH col IN ARRAY ARRAY['tether_spans.attributes', 'tether_rollouts.input', 'tether_rollouts.output',
                                'tether_rollouts.metadata', 'tether_resources.data'] LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET COMPRESSION lz4', split_part(col, '.', 1),
                       split_part(col, '.', 2));
    END LOOP;
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    NULL;
END
$$;
"""

#: schema version -> the SQL that brings the previous version to it; applied in order, each once
MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3}
SCHEMA_VERSION = max(MIGRATIONS)
_MIGRATION_LOCK = 0x7E7E_E12  # pg_advisory_xact_lock key: one process migrates at a time


async def migrate(conn: Any, where: str) -> int:
    """Bring the database on ``conn`` (an asyncpg connection) to ``SCHEMA_VERSION``; return the version it had."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS tether_schema_migrations "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM tether_schema_migrations")
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store at {where} was written by a newer tether (store schema {current}, this one "
                f"knows {SCHEMA_VERSION}); upgrade tether or use another database"
            )
        for version in sorted(v for v in MIGRATIONS if v > current):
            await conn.execute(MIGRATIONS[version])
            await conn.execute("INSERT INTO tether_schema_migrations (version) VALUES ($1)", version)
    return int(current)
