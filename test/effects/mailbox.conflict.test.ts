import { afterAll, describe, expect, it } from 'vitest';
import { enqueueMessage } from '../../workers/effects/mailbox';
import { AppError } from '../../workers/errors';
import { testPool } from '../helpers/db';
import { messages, newInstance } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('mailbox idempotency keys', () => {
  it('the same payload under an existing key is an idempotent repeat: one row, the same id', async () => {
    const inst = await newInstance(pool, 'mailbox');
    const first = await enqueueMessage(pool, inst, 'order:1', { qty: 2, sku: 'a' });
    // Key order inside the payload does not make it different (jsonb equality).
    const again = await enqueueMessage(pool, inst, 'order:1', { sku: 'a', qty: 2 });
    expect(first).toMatchObject({ inserted: true });
    expect(again).toEqual({ inserted: false, messageId: first.messageId });
    expect(await messages(pool, inst)).toHaveLength(1);
  });

  it('a different payload under an existing key is a conflict to the caller, and the stored message stays', async () => {
    const inst = await newInstance(pool, 'mailbox');
    await enqueueMessage(pool, inst, 'order:2', { qty: 2 });
    const attempt = enqueueMessage(pool, inst, 'order:2', { qty: 3 });
    await expect(attempt).rejects.toBeInstanceOf(AppError);
    await expect(attempt).rejects.toMatchObject({ code: 'conflict', status: 409 });
    expect(await messages(pool, inst)).toEqual([
      { message_key: 'order:2', payload: { qty: 2 }, state: 'pending' },
    ]);
  });
});
