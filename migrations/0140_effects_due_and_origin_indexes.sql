-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 35. Both partial, so their size is the work waiting or in flight, not the history.
--
-- The minute poll reads due mailbox messages in due-time order (oldest first), bounded by its
-- limit, instead of in instance-id order filtered after reading: a backlog on low instance
-- ids no longer hides a high-id instance's lost wake, and not-yet-due delayed messages are
-- never read (workers/effects/mailbox.ts, INSTANCES_WITH_WORK_SQL).
create index concurrently if not exists actor_mailbox_due
  on actor_mailbox (available_at_ms, id) where state = 'pending';

-- Processing effects of one origin instance: every pump's RECOVERY_DUE_SQL, the host's own
-- recovery pass (STALE_CANDIDATES_OF_INSTANCE_SQL) and the channel's housekeeping read them by
-- instance; `effects_processing` leads on the owner, so each of those read every effect in
-- flight in the service.
create index concurrently if not exists effects_processing_origin
  on effects (origin_instance_id, id) where status = 'processing';
