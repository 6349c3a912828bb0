import { AppError } from '../errors';
import { log } from '../log';

/**
 * Shape versions of what two releases exchange through Postgres (docs/operations.md "Two
 * versions at once"): actor state, mailbox payloads, effect arguments. A shape's version
 * travels inside the JSON object as `_v`; version 1, every shape as the first release writes
 * it, carries nothing, so a row of v1.0.0 and a row of any release that has not bumped the
 * shape are the same bytes. A release that changes a shape so that its previous reader would
 * misread it bumps the version its writer declares (and writes `_v`, so the shape must be an
 * object from then on); its reader accepts the previous version and the current one. A reader
 * that meets a version newer than the one it knows refuses it (`refuseNewerShape`): a stable
 * error (precondition_failed, reason `shape_version_unsupported`) and one `shape_version_refused`
 * event, before anything reads the value, so it is never misread.
 *
 * The other persisted shapes carry their version in their own format: ticket tokens `rt1.`,
 * sealed values `sk1.` (workers/crypto/sealed.ts), console sessions `v` (workers/console/session.ts),
 * and the effect runtime's processes `EFFECT_PROTOCOL_VERSION`.
 */
export const SHAPE_VERSION_KEY = '_v';

/** The version a stored value was written at: its `_v`, else 1 (what every first-release row is). */
export function shapeVersionOf(value: unknown): number {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 1;
  const v = (value as Record<string, unknown>)[SHAPE_VERSION_KEY];
  return typeof v === 'number' && Number.isInteger(v) && v >= 1 ? v : 1;
}

/** The value as its writer stores it at `version`: unchanged at 1, with `_v` after a bump. */
export function withShapeVersion<T>(value: T, version: number): T {
  if (version === 1) return value;
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`a shape at version ${version} must be a JSON object to carry ${SHAPE_VERSION_KEY}`);
  return { ...value, [SHAPE_VERSION_KEY]: version };
}

/** The refusal of a value written by a newer release: its shape, its version, the one known here. */
export class ShapeVersionRefused extends AppError {
  constructor(
    readonly shape: string,
    readonly version: number,
    readonly known: number,
  ) {
    super(
      'precondition_failed',
      `${shape} was written at shape version ${version}; this release reads up to ${known}`,
      { reason: 'shape_version_unsupported', shape, version, known },
    );
  }
}

/**
 * True (after logging `shape_version_refused` once) when `value` was written at a version newer
 * than `known`; older and current versions are false, for the reader to handle. `where` names
 * the row for the log (ids only, never the value).
 */
export function isNewerShape(
  shape: string,
  value: unknown,
  known: number,
  where: Record<string, unknown>,
): boolean {
  const version = shapeVersionOf(value);
  if (version <= known) return false;
  log.error('shape_version_refused', { shape, version, known, ...where });
  return true;
}

/** Throws ShapeVersionRefused when `value` is newer than `known` (isNewerShape). */
export function refuseNewerShape(
  shape: string,
  value: unknown,
  known: number,
  where: Record<string, unknown>,
): void {
  if (isNewerShape(shape, value, known, where))
    throw new ShapeVersionRefused(shape, shapeVersionOf(value), known);
}
