/**
 * The event trace of one schedule: every step, fault firing, answer and quiesce phase, with
 * the time since the schedule started. Printed with a failure; kept in memory otherwise.
 */
export interface TraceEvent {
  ms: number;
  step: number | null;
  text: string;
}

export class Trace {
  readonly events: TraceEvent[] = [];
  private readonly started = Date.now();
  step: number | null = null;

  add(text: string): void {
    this.events.push({ ms: Date.now() - this.started, step: this.step, text });
  }

  format(limit = 400): string {
    const shown = this.events.length > limit ? this.events.slice(-limit) : this.events;
    const head =
      shown.length < this.events.length ? [`  … ${this.events.length - shown.length} earlier events`] : [];
    return [
      ...head,
      ...shown.map(
        (e) =>
          `  ${String(e.ms).padStart(6)} ms  ${e.step === null ? '  -' : `#${String(e.step).padStart(2)}`}  ${e.text}`,
      ),
    ].join('\n');
  }
}
