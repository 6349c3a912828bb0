import type { Context } from 'hono';
import type { z } from 'zod';
import { AppError } from '../errors';
import { PG_TEXT_MESSAGE, unstorablePath } from './pg-text';

/**
 * The one policy for JSON request bodies:
 * - not JSON (a Content-Type other than application/json or application/*+json, or bytes
 *   that do not parse) → 400 `bad_request`;
 * - a string anywhere in it (a key too) that Postgres cannot store → 400 `validation_failed`,
 *   before the schema, whatever the route's schema says (`unstorableText`);
 * - JSON that breaks the schema → 400 `validation_failed`, naming the field and the rule,
 *   never the value (it may be a secret).
 * The zod-openapi routes of /v1 do not use this helper: their validator refuses another
 * Content-Type with an HTTPException 415, which renderError answers 415
 * `unsupported_media_type`, and unparsable JSON with a 400, answered `bad_request`
 * (test/reaction-tickets/tickets.issue.test.ts). Admin routes keep 400 `bad_request` for both.
 */
const JSON_CONTENT_TYPE = /^application\/([\w.-]+\+)?json\s*(;|$)/i;

function isJsonContentType(header: string | undefined): boolean {
  return header !== undefined && JSON_CONTENT_TYPE.test(header.trim());
}

const notJson = () => new AppError('bad_request', 'Body must be JSON sent as Content-Type: application/json');
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

function parseJson(contentType: string | undefined, bytes: ArrayBuffer): unknown {
  if (!isJsonContentType(contentType)) throw notJson();
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch {
    throw notJson();
  }
}

/** Reads and validates the body of a plain Hono route; with `optional`, an empty body reads as `{}`. */
export async function readJsonBody<T extends z.ZodType>(
  c: Context,
  schema: T,
  opts: { optional?: boolean } = {},
): Promise<z.output<T>> {
  const bytes = await c.req.arrayBuffer();
  const raw = opts.optional && bytes.byteLength === 0 ? {} : parseJson(c.req.header('content-type'), bytes);
  assertStorable(raw);
  return validInput(schema, raw);
}

/** 400 `validation_failed` naming where unstorable text is (never the text itself). */
export function assertStorable(value: unknown): void {
  const at = unstorablePath(value);
  if (at)
    throw new AppError('validation_failed', 'Request validation failed', [
      { path: at, message: PG_TEXT_MESSAGE },
    ]);
}

/**
 * Input against its schema (a body, a path or a query): 400 `validation_failed` naming the
 * field and the rule, never the value.
 */
export function validInput<T extends z.ZodType>(schema: T, raw: unknown): z.output<T> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success)
    throw new AppError(
      'validation_failed',
      'Request validation failed',
      parsed.error.issues.map((i) => ({ path: i.path, message: i.message })),
    );
  return parsed.data;
}
