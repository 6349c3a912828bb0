import { type Env, loadConfig } from '../workers/env';

const PLANNED_KEY = 'alarm:planned';
/** How far past its planned time a parked alarm sits: longer than any test file runs. */
const PARKED_MS = 24 * 3_600_000;

/**
 * A Durable Object's alarm, through one door. With `DO_ALARMS=auto` (production) this is
 * the storage alarm itself. With `manual` (the test harness) the planned time is stored and
 * the runtime's alarm is parked a day later: it fires only when a test runs it
 * (`runDurableObjectAlarm`), so no pass runs in the middle of a test that did not ask for
 * one, while `get()` still reports the time production would fire at.
 */
export class Alarm {
  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly env: Env,
  ) {}

  /** Read at use, not at construction: a bad environment fails the call, not the object. */
  private get manual(): boolean {
    return loadConfig(this.env).DO_ALARMS === 'manual';
  }

  async get(): Promise<number | null> {
    const armed = await this.storage.getAlarm();
    if (armed === null || !this.manual) return armed;
    return (await this.storage.get<number>(PLANNED_KEY)) ?? armed;
  }

  async set(at: number): Promise<void> {
    if (!this.manual) return this.storage.setAlarm(at);
    await this.storage.put(PLANNED_KEY, at);
    await this.storage.setAlarm(at + PARKED_MS);
  }

  /** Moves the alarm earlier only: a nearer deadline wins, a later one never postpones it. */
  async setNoLaterThan(at: number): Promise<void> {
    const current = await this.get();
    if (current === null || current > at) await this.set(at);
  }

  async delete(): Promise<void> {
    await this.storage.deleteAlarm();
    if (this.manual) await this.storage.delete(PLANNED_KEY);
  }
}
