-- Idempotency keys store the result of the command they ran: result is the
-- JSON of the command's domain result (NULL only while the claiming
-- transaction is in flight, so never seen by another), and request_hash
-- fingerprints the command and its inputs. HTTP statuses and bodies are no
-- longer stored: the API encodes a replayed result as it encodes a fresh one.
--
-- Rows written before this migration hold an HTTP response under a
-- fingerprint of the HTTP request, which this code can neither match nor
-- replay. They are expired: deleted here. A client retrying, after the
-- upgrade, a write it sent before it runs that write again, as after any
-- key's expiry.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys
    DROP COLUMN status,
    DROP COLUMN response,
    ADD COLUMN result jsonb;
