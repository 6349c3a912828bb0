import { OpenAPIHono } from '@hono/zod-openapi';
import { Hono } from 'hono';
import { z } from 'zod';
import { InspectQuery } from '../channel/inspect';
import type { AppEnv } from '../context';
import { ERROR_STATUS, type ErrorCode } from '../errors';
import { ChangeSettings, Pause, Register, Rerun, Resume, Rotate } from '../installations/routes';
import { requireAdmin } from '../middleware';
import { DirectoryBodies } from '../reaction-tickets/admin-routes';
import { EnableBody, StopBody } from '../retention/routes';
import { PageQuery } from '../typing-ledger/admin-routes';
import { ActionBody, OneBody, PreviewBody } from './dead-letters';

/**
 * The admin API's OpenAPI document, GET /admin/openapi.json (docs/operations.md "Admin API").
 *
 * The admin routes stay plain Hono routes validated by their own zod schemas; converting each
 * to createRoute would change their refusals (the zod-openapi validator answers 415 for a body
 * not sent as JSON where the admin routes answer 400 `bad_request`, lib/json-body.ts). So the
 * document registers every route here, with the request schemas the routes themselves parse
 * (imported, never copied) and the response shapes they answer. test/admin/openapi.test.ts
 * walks the app's routes and fails on an admin route this document does not list, or a listed
 * one that does not exist.
 *
 * Behind the admin token like every route it describes: only operators, who hold the token,
 * need it, and the map of the admin surface is of no use to anyone else.
 */

const ErrorBody = z
  .object({
    error: z.object({
      code: z.enum(Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]]),
      message: z.string(),
      requestId: z.string(),
      details: z.unknown().optional(),
    }),
  })
  .meta({ id: 'Error', description: 'Every refusal: a stable code (workers/errors.ts)' });

const Json = z.record(z.string(), z.unknown());
const Ok = z.object({ ok: z.literal(true) });

const Installation = z
  .object({
    id: z.string(),
    workspace_id: z.string(),
    app_id: z.string(),
    api_base: z.string(),
    has_encrypt_key: z.boolean(),
    credential_version: z.number(),
    webhook_path: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Installation', description: 'Secrets go in, never come out' });
const Settings = z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()]));
const SettingsAnswer = z.object({
  settings: Settings,
  changed: z.array(z.object({ setting: z.string(), from: z.unknown(), to: z.unknown() })),
});

const BulkRange = {
  installation: z.string(),
  from: z.string().describe('ISO 8601: the range starts at this death time (inclusive)'),
  to: z.string().describe('ISO 8601: the range ends here (inclusive), closed at the time of the preview'),
};
const BulkPreview = z
  .object({
    ...BulkRange,
    count: z.number().int().describe(`Dead letters in the range (capped at 100,000)`),
    countCapped: z.boolean(),
    ids: z.array(z.string()).describe('The first page (at most `limit`, default 1,000)'),
    cursor: z.string().nullable().describe('The first page to requeue or discard; null when none matches'),
  })
  .meta({ id: 'DeadLetterPreview' });
const BulkResult = z
  .object({
    action: z.enum(['requeue', 'discard']),
    ...BulkRange,
    changed: z.number().int().describe('Rows this request changed: 0 on a repeat'),
    ids: z.array(z.string()),
    next: z.string().nullable().describe('The next page, null after the last'),
    woken: z.number().int().describe('Instances whose hosts are woken after the commit (0 for a discard)'),
  })
  .meta({ id: 'DeadLetterPage' });

interface Doc {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  summary: string;
  body?: z.ZodType;
  query?: z.ZodObject;
  answer: z.ZodType;
  status?: 200 | 201 | 202;
  /** Retention routes take the cleanup's own credential too (docs/retention.md). */
  retention?: boolean;
}

const pathParams = (path: string) => [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);

const ROUTES: Doc[] = [
  {
    method: 'get',
    path: '/admin/status',
    summary: 'Database, backlogs and the owners’ control state',
    answer: Json,
  },
  { method: 'get', path: '/admin/openapi.json', summary: 'This document', answer: Json },
  {
    method: 'post',
    path: '/admin/effects/dead-letters/preview',
    summary: 'Count the dead letters of an installation in a death-time range; changes nothing',
    body: PreviewBody,
    answer: BulkPreview,
  },
  {
    method: 'post',
    path: '/admin/effects/dead-letters/requeue',
    summary: 'Requeue one page of a previewed range (recorded with the operator)',
    body: ActionBody,
    answer: BulkResult,
  },
  {
    method: 'post',
    path: '/admin/effects/dead-letters/discard',
    summary: 'Delete one page of a previewed range now (recorded with the operator)',
    body: ActionBody,
    answer: BulkResult,
  },
  ...(['requeue', 'discard'] as const).map(
    (a): Doc => ({
      method: 'post',
      path: `/admin/effects/dead-letters/{id}/${a}`,
      summary: `${a === 'requeue' ? 'Requeue' : 'Discard'} one dead-lettered message (recorded with the operator); 404 unless it is dead`,
      body: OneBody,
      answer: z.object({ id: z.string(), outcome: z.enum(['requeued', 'discarded']) }),
    }),
  ),
  {
    method: 'post',
    path: '/admin/lark/installations',
    summary: 'Register a Lark installation',
    body: Register,
    answer: z.object({ installation: Installation }),
    status: 201,
  },
  {
    method: 'get',
    path: '/admin/lark/installations/{id}',
    summary: 'An installation (no secret)',
    answer: z.object({ installation: Installation }),
  },
  {
    method: 'post',
    path: '/admin/lark/installations/{id}/rotate',
    summary: 'Rotate credentials or the API host',
    body: Rotate,
    answer: z.object({ installation: Installation }),
  },
  {
    method: 'get',
    path: '/admin/lark/installations/{id}/settings',
    summary: 'Every setting, defaults included',
    answer: z.object({ settings: Settings }),
  },
  {
    method: 'patch',
    path: '/admin/lark/installations/{id}/settings',
    summary: 'Change settings (recorded with the operator)',
    body: ChangeSettings,
    answer: SettingsAnswer,
  },
  {
    method: 'post',
    path: '/admin/lark/installations/{id}/pause',
    summary: 'Pause: once answered, no turn of the installation starts',
    body: Pause,
    answer: SettingsAnswer,
  },
  {
    method: 'post',
    path: '/admin/lark/installations/{id}/resume',
    summary: 'Resume, answering or dropping the backlog',
    body: Resume,
    answer: SettingsAnswer.extend({ backlog: z.enum(['answer', 'drop']), conversations: z.number().int() }),
  },
  {
    method: 'post',
    path: '/admin/lark/installations/{id}/turns/{turnId}/rerun',
    summary: "Re-run a failed turn (turnId: the turn's reply uuid): a new turn over the same inputs",
    body: Rerun,
    status: 202,
    answer: z.object({
      rerun: z.object({ session_id: z.string(), turn_no: z.number().int(), inputs: z.number().int() }),
    }),
  },
  {
    method: 'get',
    path: '/admin/lark/conversations',
    summary:
      "The conversation inspector: one installation's conversations by chat id, message id or open_id, and the chosen one (or the newest) on one timeline",
    query: InspectQuery,
    answer: z.object({ matches: z.array(Json), conversation: Json.nullable(), timeline: z.array(Json) }),
  },
  {
    method: 'delete',
    path: '/admin/lark/installations/{id}',
    summary: 'Delete an installation',
    answer: z.object({ deleted: z.literal(true) }),
  },
  {
    method: 'get',
    path: '/admin/typing-reactions/status',
    summary: 'Typing badges per workspace and the maintenance state',
    answer: z.object({ workspaces: z.array(Json), maintenance: Json }),
  },
  ...(['enable', 'disable', 'stop'] as const).map(
    (a): Doc => ({
      method: 'post',
      path: `/admin/typing-reactions/${a}`,
      summary: `${a[0]!.toUpperCase()}${a.slice(1)} the typing maintenance`,
      answer: Json,
    }),
  ),
  {
    method: 'get',
    path: '/admin/typing-reactions/workspaces/{workspaceId}/rows',
    summary: 'Badges the service gave up on, a page',
    query: PageQuery,
    answer: z.object({
      workspace_id: z.string(),
      state: z.enum(['abandoned', 'overdue']),
      rows: z.array(Json),
      next: z.string().nullable(),
    }),
  },
  {
    method: 'post',
    path: '/admin/typing-reactions/rows/{rowId}/remove',
    summary: 'Remove an abandoned badge by hand',
    answer: z.object({
      outcome: z.string(),
      code: z.number().nullable(),
      retry_after_seconds: z.number().optional(),
      via: z.string(),
      row: Json.optional(),
    }),
  },
  {
    method: 'post',
    path: '/admin/retention/enable',
    summary: 'Enable the retention cleanup (RETENTION_ADMIN_TOKEN only)',
    body: EnableBody,
    answer: Json,
    retention: true,
  },
  {
    method: 'post',
    path: '/admin/retention/stop',
    summary: 'Stop the retention cleanup',
    body: StopBody,
    answer: Json,
    retention: true,
  },
  {
    method: 'post',
    path: '/admin/retention/rollback',
    summary: 'Stop and roll back the cleanup (RETENTION_ADMIN_TOKEN only)',
    body: StopBody,
    answer: Json,
    retention: true,
  },
  {
    method: 'get',
    path: '/admin/retention/status',
    summary: 'The retention cleanup’s state',
    answer: Json,
    retention: true,
  },
  {
    method: 'get',
    path: '/admin/reaction-contract',
    summary: 'The legacy write contract’s state',
    answer: Json,
  },
  {
    method: 'post',
    path: '/admin/reaction-contract/legacy/close',
    summary: 'Close the legacy write contract',
    answer: Json,
  },
  {
    method: 'put',
    path: '/admin/workspaces/{id}',
    summary: 'Upsert a workspace',
    body: DirectoryBodies.workspace,
    answer: Ok,
  },
  {
    method: 'put',
    path: '/admin/actors/{id}',
    summary: 'Upsert an actor',
    body: DirectoryBodies.actor,
    answer: Ok,
  },
  {
    method: 'post',
    path: '/admin/actors/{id}/sign-out',
    summary: 'End every session of an actor',
    answer: z.object({ signedOutAt: z.string() }),
  },
  {
    method: 'put',
    path: '/admin/conversations/{id}',
    summary: 'Upsert a conversation',
    body: DirectoryBodies.conversation,
    answer: Ok,
  },
  {
    method: 'post',
    path: '/admin/conversations/{id}/members',
    summary: 'Add and remove members',
    body: DirectoryBodies.members,
    answer: Json,
  },
  {
    method: 'put',
    path: '/admin/messages/{id}',
    summary: 'Upsert a message',
    body: DirectoryBodies.message,
    answer: Ok,
  },
];

function document() {
  // Only its registry and generator are used: it serves no route.
  const holder = new OpenAPIHono();
  const registry = holder.openAPIRegistry;
  registry.registerComponent('securitySchemes', 'adminBearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'ADMIN_TOKEN (the retention routes also take RETENTION_ADMIN_TOKEN)',
  });
  const json = (schema: z.ZodType, description: string) => ({
    description,
    content: { 'application/json': { schema } },
  });
  for (const r of ROUTES) {
    const names = pathParams(r.path);
    registry.registerPath({
      method: r.method,
      path: r.path,
      summary: r.summary,
      security: [{ adminBearer: [] }],
      request: {
        ...(names.length ? { params: z.object(Object.fromEntries(names.map((n) => [n, z.string()]))) } : {}),
        ...(r.query ? { query: r.query } : {}),
        ...(r.body ? { body: { required: true, content: { 'application/json': { schema: r.body } } } } : {}),
      },
      responses: {
        [r.status ?? 200]: json(r.answer, 'Done'),
        400: json(ErrorBody, 'Bad input (validation_failed and the route’s own codes); nothing written'),
        401: json(ErrorBody, 'No or wrong admin token'),
        ...(r.retention ? { 403: json(ErrorBody, 'This action needs RETENTION_ADMIN_TOKEN') } : {}),
        ...(names.length ? { 404: json(ErrorBody, 'No such resource') } : {}),
        503: json(ErrorBody, 'The database or an owner is unavailable: retry'),
      },
    });
  }
  return holder.getOpenAPI31Document({
    openapi: '3.1.0',
    info: {
      title: 'reaction-ledger admin API',
      version: '1.0.0',
      description:
        'Operator routes, all behind `Authorization: Bearer $ADMIN_TOKEN`. Errors: {error:{code,message,requestId,details?}}.',
    },
  });
}

/**
 * The generator writes a regex with flags as `source/flags` (the operator name's
 * `/^[^\p{Cc}]+$/u` came out as `^[^\p{Cc}]+$/u`, a pattern nothing matches). JSON Schema
 * patterns are ECMA-262 with Unicode semantics: the flags go. A `/` inside a regex source is
 * always escaped, so an unescaped `/` before trailing letters is the generator's.
 */
function withoutRegexFlags<T>(node: T): T {
  if (Array.isArray(node)) node.forEach(withoutRegexFlags);
  else if (node && typeof node === 'object')
    for (const [k, v] of Object.entries(node as Record<string, unknown>)) {
      if (k === 'pattern' && typeof v === 'string')
        (node as Record<string, unknown>)[k] = v.replace(/(?<!\\)\/[dgimsuvy]+$/, '');
      else withoutRegexFlags(v);
    }
  return node;
}

let built: ReturnType<typeof document> | undefined;

/** The document, built once per isolate (it depends on code only). */
export function adminOpenApiDocument() {
  built ??= withoutRegexFlags(document());
  return built;
}

export const adminOpenApi = new Hono<AppEnv>().get('/', requireAdmin(), (c) =>
  c.json(adminOpenApiDocument()),
);
