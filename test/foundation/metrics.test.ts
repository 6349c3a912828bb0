import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import worker from '../../workers/index';
import { dataPoint, type MetricsSink } from '../../workers/metrics';
import { routeOf } from '../../workers/middleware';
import { captureLogLines } from '../helpers/logs';

type Point = Parameters<MetricsSink['writeDataPoint']>[0];

/**
 * Analytics Engine keeps nothing locally (Miniflare's dataset only forwards to a remote one), so
 * the test hands the Worker the binding the platform would, one that keeps what it is given.
 * Everything between the request and writeDataPoint is the production code path.
 */
function recordingDataset(): MetricsSink & { points: Point[] } {
  const points: Point[] = [];
  return { points, writeDataPoint: (p) => points.push(p) };
}

async function fetchWith(metrics: MetricsSink, request: Request): Promise<Response> {
  const ctx = createExecutionContext();
  // A new env object: loadConfig binds its METRICS dataset (workers/env.ts).
  const res = await worker.fetch(request, { ...env, METRICS: metrics as AnalyticsEngineDataset }, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe('metrics: one Analytics Engine point per measured event (workers/metrics.ts)', () => {
  it('one shape for every point: name as index and first blob, outcome, scope, value and a count', () => {
    expect(dataPoint('lark_call_ms', 12.5, 'ok', 'reactions.create')).toEqual({
      indexes: ['lark_call_ms'],
      blobs: ['lark_call_ms', 'ok', 'reactions.create'],
      doubles: [12.5, 1],
    });
    // A value that is not a number is written as 0, never NaN (which the SQL API would drop).
    expect(dataPoint('turn_ms', Number.NaN).doubles).toEqual([0, 1]);
    expect(dataPoint('agent_ms', 1, 'x'.repeat(500)).blobs[1]).toHaveLength(96);
  });

  it('every HTTP answer is one http_answer_ms point labelled by its stable code and route, ids taken out', async () => {
    const metrics = recordingDataset();
    const ok = await fetchWith(metrics, new Request('http://test/healthz'));
    expect(ok.status).toBe(200);
    const refused = await fetchWith(
      metrics,
      new Request('http://test/v1/reaction-operations/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      }),
    );
    expect(refused.status).toBe(401);
    const answers = metrics.points.filter((p) => p.indexes?.[0] === 'http_answer_ms');
    expect(answers.map((p) => p.blobs?.slice(1))).toEqual([
      ['200', 'GET /healthz'],
      [((await refused.json()) as { error: { code: string } }).error.code, 'PUT /v1/reaction-operations/:id'],
    ]);
    for (const p of answers) expect(p.doubles?.[0]).toBeGreaterThanOrEqual(0);
  });

  it('route labels never carry an id, token or query', () => {
    expect(routeOf({ method: 'POST', path: '/lark/events/li_01HXYZ' })).toBe('POST /lark/events/:id');
    expect(routeOf({ method: 'POST', path: '/v1/reaction-operations/0190a1b2-c3d4/retire' })).toBe(
      'POST /v1/reaction-operations/:id/retire',
    );
    expect(routeOf({ method: 'GET', path: '/admin/typing-reactions/tr_abc/retry' })).toBe(
      'GET /admin/typing-reactions/:id/retry',
    );
  });

  it('a dataset that throws never fails an answer, and is logged once per isolate', async () => {
    const broken: MetricsSink = {
      writeDataPoint: () => {
        throw new Error('dataset unavailable');
      },
    };
    const logs = captureLogLines();
    const first = await fetchWith(broken, new Request('http://test/healthz'));
    const second = await fetchWith(broken, new Request('http://test/healthz'));
    logs.restore();
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(logs.events('metrics_write_failed')).toHaveLength(1);
  });
});
