import type { ContentfulStatusCode } from 'hono/utils/http-status';

/** The closed set of error codes a client can switch on. Add here, never inline. */
export const ERROR_STATUS = {
  bad_request: 400,
  validation_failed: 400,
  unauthorized: 401,
  forbidden: 403,
  /** The console's CSRF token is missing or not the session's (workers/console/routes.ts). */
  csrf_invalid: 403,
  /** A console action was posted without its confirmation. */
  confirmation_required: 400,
  /** A bulk range whose `from` is after its `to` (workers/effects/dead-letters-bulk.ts). */
  range_invalid: 400,
  /** A page cursor that is not the `next` of a previous page of the same range. */
  cursor_invalid: 400,
  /** A bulk action whose range is not the closed one a preview returned. */
  preview_required: 400,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  intent_mismatch: 409,
  revision_conflict: 409,
  operation_expired: 410,
  /** The server no longer holds the operation's ticket: whether it applied is unknown; read the current state. */
  operation_outcome_unknown: 410,
  /** The operation ID's creation stamp is ahead of server time by more than the allowed skew. */
  operation_clock_skew: 422,
  gone: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  unknown_reference: 422,
  lark_unknown_installation: 404,
  lark_bad_signature: 401,
  lark_stale_timestamp: 401,
  lark_bad_token: 401,
  lark_bad_event: 400,
  precondition_failed: 412,
  rate_limited: 429,
  ticket_invalid: 403,
  ticket_required: 409,
  operation_retired: 409,
  legacy_contract_closed: 426,
  quota_exceeded: 429,
  typing_row_active: 409,
  typing_row_cleaned: 409,
  typing_no_credentials: 409,
  /** A re-run of a turn that did not fail (delivered, anchor gone) (workers/channel/rerun.ts). */
  turn_not_failed: 409,
  /** The failed turn was re-run already: one re-run per failed turn. */
  turn_already_rerun: 409,
  /** A turn of the chat is running, or a re-run of it is waiting to start. */
  turn_running: 409,
  /** The installation is paused: resume it first (workers/channel/pause.ts). */
  installation_paused: 409,
  /** The failed turn's recorded inputs are gone (retention): nothing to re-run. */
  turn_inputs_gone: 409,
  internal_error: 500,
  bad_environment: 500,
  service_unavailable: 503,
  timeout: 504,
  agent_failed: 502,
  agent_timeout: 504,
  /** An agent's event stream broke the protocol (workers/agents/stream.ts). */
  agent_stream_invalid: 502,
} as const satisfies Record<string, ContentfulStatusCode>;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface ErrorBody {
  error: { code: ErrorCode; message: string; requestId: string; details?: unknown };
}

/** The one error type routes throw; `onError` renders it as `ErrorBody`. */
export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'AppError';
  }

  get status(): ContentfulStatusCode {
    return ERROR_STATUS[this.code];
  }
}
