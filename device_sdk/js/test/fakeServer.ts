/** An in-memory stand-in for the device API, as a `fetch` function: registration answers with the device id the
 * public key implies (as the server does), other routes from the test's handler; every request is recorded. */

import { b64decode } from "../src/bytes.js";
import { deviceIdFor } from "../src/envelope.js";

export interface Seen {
  method: string;
  path: string;
  headers: Headers;
  body: Uint8Array;
}

export type Handler = (req: Seen) => Response | Promise<Response>;

export const json = (status: number, payload: unknown, headers: Record<string, string> = {}): Response =>
  new Response(JSON.stringify(payload), { status, headers: { "Content-Type": "application/json", ...headers } });

export function fakeServer(handler: Handler): { fetch: typeof fetch; seen: Seen[] } {
  const seen: Seen[] = [];
  const fetchFn = async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input));
    const body = init.body ? new Uint8Array(init.body as ArrayBuffer) : new Uint8Array();
    const req = { method: init.method ?? "GET", path: url.pathname + url.search, headers: new Headers(init.headers), body };
    seen.push(req);
    if (init.signal?.aborted) throw new DOMException("aborted", "AbortError");
    if (req.method === "POST" && url.pathname === "/v1/device/register") {
      const key = JSON.parse(new TextDecoder().decode(body)).public_key as string;
      return json(201, { device_id: await deviceIdFor(b64decode(key, "public_key", 32)) });
    }
    return handler(req);
  };
  return { fetch: fetchFn as typeof fetch, seen };
}

export const idle = (retryAfter = 7): Response => json(200, { assignment: null, retry_after: retryAfter, queries_running: 0 });

/** A request's JSON body. */
export const bodyJson = (req: Seen): any => JSON.parse(new TextDecoder().decode(req.body));

/** A server phase message, as `GET …/phases/{p}/next` answers it. */
export const phaseMessage = (body: Uint8Array, phase: number): Response =>
  new Response(body as BodyInit, { status: 200, headers: { "Content-Type": "application/octet-stream", "X-FA-Phase": String(phase) } });
