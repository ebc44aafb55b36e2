-- The poison queue's lifecycle (projections/poisonqueue.go; docs/projections.md,
-- "The poison queue"): the poison topic FEED_TOPIC.poison is append-only, so
-- what became of each poisoned record is kept here, by its place in that
-- topic. A record without a row is pending; `feed poison replay` records
-- 'replayed' once the record and every later event of its key went through
-- its group's projector again, `feed poison discard` records 'discarded'.
CREATE TABLE poison_resolutions (
    topic           text        NOT NULL,
    kafka_partition int         NOT NULL,
    kafka_offset    bigint      NOT NULL,
    consumer_group  text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('replayed', 'discarded')),
    resolved_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition, kafka_offset)
);
