/**
 * Where an installation's Open API calls go. The app secret travels to this host (tenant token
 * requests), so it must be reached over TLS: https, or plain http only to loopback.
 *
 * Loopback is allowed in every environment, with no setting that says "development": a local
 * emulator (npm run dev, tests, bench) listens there, and a deployed Worker cannot reach a
 * loopback address at all, so such an api_base in production fails to connect instead of
 * sending the secret anywhere. A setting to turn the exception on could be left on by mistake.
 */
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

export const API_BASE_RULE = 'an https:// URL (plain http:// only to 127.0.0.1, localhost or [::1])';

export function isAllowedApiBase(value: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  if (url.protocol === 'https:') return true;
  return url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname);
}
