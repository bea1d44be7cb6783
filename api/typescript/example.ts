// A typed use of the generated types (evs.d.ts), type-checked with
// tsc --strict by `make ts-check`: if the contract changes in a way that
// breaks a client written against it, this file stops compiling.
import type { components, paths } from "./evs";

type VerifyBody = paths["/v1/verify"]["post"]["requestBody"]["content"]["application/json"];
type VerifyReply = components["schemas"]["VerifyResult"];
type ResultsPage = components["schemas"]["ResultsPage"];
type ErrorEnvelope = components["schemas"]["ErrorEnvelope"];
type Status = components["schemas"]["Status"];

/** An error reply of the API. */
export class EvsError extends Error {
  constructor(readonly status: number, readonly code: ErrorEnvelope["error"]["code"], message: string, readonly requestId: string) {
    super(message);
  }
}

async function call<T>(base: string, key: string, path: string, init: RequestInit = {}): Promise<T> {
  const res = await fetch(base + path, { ...init, headers: { "X-Api-Key": key, "Content-Type": "application/json", ...init.headers } });
  const body: unknown = await res.json();
  if (!res.ok) {
    const e = (body as ErrorEnvelope).error;
    throw new EvsError(res.status, e.code, e.message, e.requestId);
  }
  return body as T;
}

/** Verifies one address; the verdict says whether to accept it. */
export async function verify(base: string, key: string, email: string): Promise<{ status: Status; suggestion: string | null; acceptAll: boolean | null }> {
  const body: VerifyBody = { email, mode: "quick" };
  const r = await call<VerifyReply>(base, key, "/v1/verify", { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, suggestion: r.decision.suggestion ?? null, acceptAll: r.decision.flags.acceptAll ?? null };
}

/** Yields every result of a batch, page by page. */
export async function* results(base: string, key: string, id: string): AsyncGenerator<ResultsPage["results"][number]> {
  let cursor: string | null = null;
  do {
    const q: string = cursor === null ? "" : "&cursor=" + encodeURIComponent(cursor);
    const page: ResultsPage = await call<ResultsPage>(base, key, "/v1/requests/" + encodeURIComponent(id) + "/results?limit=1000" + q);
    yield* page.results;
    cursor = page.nextCursor ?? null;
  } while (cursor !== null);
}
