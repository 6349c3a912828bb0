import { DurableObject } from 'cloudflare:workers';
import type { Env } from '../workers/env';

/** One per workspace: quota fences for ticket issuance and admission. */
export class WorkspaceQuota extends DurableObject<Env> {}
