// flow.ts is not an example: it is the whole API flow that the Go test suite
// (internal/e2e) drives after `tsc -p .`, as `node dist/internal/flow.js`, to
// check that the client generated from api/openapi.yaml (openapi-typescript +
// openapi-fetch) type-checks and works against a real server. Every call goes
// through the typed client methods; nothing here calls fetch on the API.
//
//	GATEHOUSE_API=http://127.0.0.1:8080 GATEHOUSE_EMAIL=... GATEHOUSE_PASSWORD=... \
//	GATEHOUSE_WEBHOOK_URL=http://127.0.0.1:4299/webhooks node dist/internal/flow.js
//
// Each step prints `ok <step> <detail>` on stdout. The first unexpected answer
// prints `FAIL <step>: <expected, got>` on stderr and exits 1. Secret keys,
// webhook secrets and session tokens are never printed.
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "../gatehouse.js";

type Charge = components["schemas"]["Charge"];
type Refund = components["schemas"]["Refund"];
type ChargeEvent = components["schemas"]["ChargeEvent"];
type RefundEvent = components["schemas"]["RefundEvent"];

// The steps, in order: a failure that is not an API answer (a refused
// connection, say) is reported against the step after the last one passed.
const STEPS: readonly string[] = [
  "login", "create_key", "list_keys", "create_endpoint", "list_endpoints",
  "create_charge", "replay_charge", "captured", "create_refund", "refund_succeeded",
  "list_charges", "get_charge", "list_refunds", "get_refund", "list_events", "get_event",
  "delete_endpoint", "revoke_key", "revoked_refused", "done",
];
let passed = 0;

function ok(step: string, detail = ""): void {
  console.log(detail ? `ok ${step} ${detail}` : `ok ${step}`);
  passed = STEPS.indexOf(step) + 1;
}

function fail(step: string, detail: string): never {
  console.error(`FAIL ${step}: ${detail}`);
  process.exit(1);
}

function must(step: string, cond: boolean, detail: string): asserts cond {
  if (!cond) fail(step, detail);
}

// The error body of every error answer: {"error": {"code", "message", ...}}.
type ApiError = components["schemas"]["Error"];

// code reads error.code from an error answer; optional chaining because a
// proxy in between could still answer something that is not the API's JSON.
function code(error: ApiError | undefined): string {
  return error?.error?.code ?? "no error body";
}

// check returns the body of an answer if it came with the status wanted.
function check<T>(
  step: string,
  result: { data?: T; error?: ApiError; response: Response },
  want: number,
): T {
  const { data, error, response } = result;
  if (response.status !== want) {
    fail(step, `expected ${want}, got ${response.status}${error ? ` ${code(error)}` : ""}`);
  }
  must(step, data !== undefined, `expected a JSON body with the ${want}, got none`);
  return data;
}

// poll calls attempt every 100 ms until it returns a value, for 30 s at most.
// attempt returns a string to say what it saw instead.
async function poll<T extends object>(
  step: string,
  expected: string,
  attempt: () => Promise<T | string>,
): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const got = await attempt();
    if (typeof got !== "string") return got;
    if (Date.now() > deadline) fail(step, `expected ${expected} within 30 s, last saw ${got}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function env(name: string): string {
  const value = process.env[name];
  if (!value) fail("login", `${name} is not set`);
  return value;
}

async function main(): Promise<void> {
  const baseUrl = env("GATEHOUSE_API");
  const email = env("GATEHOUSE_EMAIL");
  const password = env("GATEHOUSE_PASSWORD");
  const webhookUrl = env("GATEHOUSE_WEBHOOK_URL");

  // 1. Sign in: the session token manages API keys.
  const anonymous = createClient<paths>({ baseUrl });
  // A member with two-factor sign-in on gets 401 mfa_required with a
  // challenge for POST /v1/auth/mfa instead; this account has it off.
  const login = check("login", await anonymous.POST("/v1/auth/login", { body: { email, password } }), 200);
  must("login", login.token_type === "Bearer", `expected token_type Bearer, got ${login.token_type}`);
  must("login", login.merchant.email.toLowerCase() === email.toLowerCase(), `expected merchant ${email}, got ${login.merchant.email}`);
  must("login", login.token.length > 0, "expected a session token, got an empty one");
  ok("login", login.merchant.id);
  const session = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${login.token}` } });

  // 2. Create a key pair; the optional fields (environment) are left out.
  const key = check("create_key", await session.POST("/v1/me/api_keys", {
    body: { name: "sdk flow" },
  }), 201);
  const secretKey = key.secret_key;
  must("create_key", secretKey !== undefined && secretKey.startsWith("sk_test_"), "expected a secret_key starting with sk_test_");
  must("create_key", key.revoked_at === null, `expected revoked_at null, got ${key.revoked_at}`);
  must("create_key", key.id.startsWith("key_"), `expected an id starting with key_, got ${key.id}`);
  ok("create_key", key.id);

  // 3. The new key is listed.
  const keys = check("list_keys", await session.GET("/v1/me/api_keys", { params: { query: { limit: 100 } } }), 200);
  must("list_keys", keys.data.some((k) => k.id === key.id), `expected ${key.id} in the list of ${keys.data.length} keys`);
  ok("list_keys", `${keys.data.length} keys`);

  // Everything below takes the secret key.
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${secretKey}` } });

  // 4. Register a webhook endpoint.
  const created = check("create_endpoint", await client.POST("/v1/me/webhook_endpoints", {
    body: { url: webhookUrl, events: ["charge.captured", "refund.succeeded"], description: "sdk flow" },
  }), 201);
  const endpoint = created.webhook_endpoint;
  must("create_endpoint", created.webhook_secret.startsWith("whsec_"), "expected a webhook_secret starting with whsec_");
  must("create_endpoint", endpoint.status === "enabled", `expected status enabled, got ${endpoint.status}`);
  must("create_endpoint", endpoint.disabled_reason === null, `expected disabled_reason null, got ${endpoint.disabled_reason}`);
  ok("create_endpoint", endpoint.id);

  // 5. It is listed.
  const endpoints = check("list_endpoints", await client.GET("/v1/me/webhook_endpoints", { params: { query: { limit: 100 } } }), 200);
  must("list_endpoints", endpoints.data.some((e) => e.id === endpoint.id), `expected ${endpoint.id} in the list`);
  ok("list_endpoints", `${endpoints.data.length} endpoints`);

  // 6. Charge a test card, then send the same request under the same
  // Idempotency-Key: the answer is a replay of the first, not a new charge.
  const idempotencyKey = randomUUID();
  const chargeRequest: components["schemas"]["CreateChargeRequest"] = {
    amount: 2000,
    currency: "usd",
    payment_method: "card",
    card: { number: "4242424242424242", exp_month: 12, exp_year: 2030, cvc: "123" },
    description: "sdk flow",
  };
  const createCharge = () => client.POST("/v1/charges", {
    params: { header: { "Idempotency-Key": idempotencyKey } },
    body: chargeRequest,
  });
  const first = await createCharge();
  const charge = check("create_charge", first, 201);
  must("create_charge", charge.status === "created", `expected status created, got ${charge.status}`);
  must("create_charge", charge.amount === 2000, `expected amount 2000, got ${charge.amount}`);
  must("create_charge", charge.currency === "USD", `expected currency USD, got ${charge.currency}`);
  must("create_charge", charge.card.last4 === "4242", `expected card.last4 4242, got ${charge.card.last4}`);
  must("create_charge", first.response.headers.get("Idempotent-Replayed") === null, "expected no Idempotent-Replayed on the first answer");
  ok("create_charge", charge.id);

  const second = await createCharge();
  const replay = check("replay_charge", second, 201);
  must("replay_charge", replay.id === charge.id, `expected the same charge ${charge.id}, got ${replay.id}`);
  const replayed = second.response.headers.get("Idempotent-Replayed");
  must("replay_charge", replayed === "true", `expected Idempotent-Replayed: true, got ${replayed}`);
  ok("replay_charge", replay.id);

  // 7. The provider call runs in the background: wait for the capture.
  const captured = await poll<Charge>("captured", "status captured", async () => {
    const c = check("captured", await client.GET("/v1/charges/{id}", { params: { path: { id: charge.id } } }), 200);
    if (c.status === "failed") fail("captured", `expected status captured, got failed (${c.failure_code})`);
    return c.status === "captured" ? c : `status ${c.status}`;
  });
  must("captured", captured.amount_captured === 2000, `expected amount_captured 2000, got ${captured.amount_captured}`);
  ok("captured", captured.id);

  // 8. Refund part of it, and wait for the provider to settle the refund.
  const refund = check("create_refund", await client.POST("/v1/refunds", {
    body: { charge: charge.id, amount: 500, reason: "requested_by_customer" },
  }), 201);
  must("create_refund", refund.status === "pending", `expected status pending, got ${refund.status}`);
  must("create_refund", refund.reason === "requested_by_customer", `expected reason requested_by_customer, got ${refund.reason}`);
  ok("create_refund", refund.id);

  await poll<Refund>("refund_succeeded", "status succeeded", async () => {
    const r = check("refund_succeeded", await client.GET("/v1/refunds/{id}", { params: { path: { id: refund.id } } }), 200);
    if (r.status === "failed") fail("refund_succeeded", `expected status succeeded, got failed (${r.failure_code})`);
    return r.status === "succeeded" ? r : `status ${r.status}`;
  });
  ok("refund_succeeded", refund.id);

  // 9. The charge, listed and read, shows the refund.
  const charges = check("list_charges", await client.GET("/v1/charges", { params: { query: { limit: 10 } } }), 200);
  const listed = charges.data.find((c) => c.id === charge.id);
  must("list_charges", listed !== undefined, `expected ${charge.id} among the ${charges.data.length} newest charges`);
  must("list_charges", listed.amount_refunded === 500, `expected amount_refunded 500, got ${listed.amount_refunded}`);
  ok("list_charges", `${charges.data.length} charges`);

  const got = check("get_charge", await client.GET("/v1/charges/{id}", { params: { path: { id: charge.id } } }), 200);
  must("get_charge", got.id === charge.id, `expected ${charge.id}, got ${got.id}`);
  ok("get_charge", got.id);

  // 10. The refunds of the charge.
  const refunds = check("list_refunds", await client.GET("/v1/refunds", { params: { query: { charge: charge.id } } }), 200);
  must("list_refunds", refunds.data.some((r) => r.id === refund.id), `expected ${refund.id} among the refunds of ${charge.id}`);
  ok("list_refunds", `${refunds.data.length} refunds`);

  const gotRefund = check("get_refund", await client.GET("/v1/refunds/{id}", { params: { path: { id: refund.id } } }), 200);
  must("get_refund", gotRefund.id === refund.id, `expected ${refund.id}, got ${gotRefund.id}`);
  ok("get_refund", gotRefund.id);

  // 11. The events. event_type discriminates Event: in each case below the
  // compiler knows which `data` the event carries.
  const [capturedEvent, refundEvent] = await poll<[ChargeEvent, RefundEvent]>(
    "list_events", "a charge.captured and a refund.succeeded event", async () => {
      const events = check("list_events", await client.GET("/v1/events", { params: { query: { limit: 100 } } }), 200);
      let onCharge: ChargeEvent | undefined;
      let onRefund: RefundEvent | undefined;
      for (const event of events.data) {
        switch (event.event_type) {
          case "charge.captured":
            if (event.data.charge.id === charge.id) onCharge = event;
            break;
          case "refund.succeeded":
            if (event.data.refund.id === refund.id) onRefund = event;
            break;
        }
      }
      if (onCharge && onRefund) return [onCharge, onRefund];
      return `charge.captured ${onCharge ? "found" : "missing"}, refund.succeeded ${onRefund ? "found" : "missing"}`;
    });
  ok("list_events", `${capturedEvent.id} ${refundEvent.id}`);

  const event = check("get_event", await client.GET("/v1/events/{id}", { params: { path: { id: refundEvent.id } } }), 200);
  must("get_event", event.id === refundEvent.id, `expected ${refundEvent.id}, got ${event.id}`);
  must("get_event", event.event_type === "refund.succeeded", `expected refund.succeeded, got ${event.event_type}`);
  must("get_event", event.data.refund.amount === 500, `expected data.refund.amount 500, got ${event.data.refund.amount}`);
  ok("get_event", event.id);

  // 12. Delete the endpoint; it is gone.
  const deleted = check("delete_endpoint", await client.DELETE("/v1/me/webhook_endpoints/{id}", {
    params: { path: { id: endpoint.id } },
  }), 200);
  must("delete_endpoint", deleted.deleted === true, `expected deleted true, got ${deleted.deleted}`);
  const gone = await client.GET("/v1/me/webhook_endpoints/{id}", { params: { path: { id: endpoint.id } } });
  must("delete_endpoint", gone.response.status === 404 && code(gone.error) === "not_found",
    `expected 404 not_found after the delete, got ${gone.response.status} ${code(gone.error)}`);
  ok("delete_endpoint", endpoint.id);

  // 13. Revoke the key (revokeApiKey takes a secret key: this one revokes
  // itself); from then on it is refused.
  const revoked = check("revoke_key", await client.DELETE("/v1/me/api_keys/{id}", { params: { path: { id: key.id } } }), 200);
  must("revoke_key", typeof revoked.revoked_at === "string", `expected revoked_at set, got ${revoked.revoked_at}`);
  ok("revoke_key", revoked.id);

  const refused = await client.GET("/v1/charges/{id}", { params: { path: { id: charge.id } } });
  const refusal = refused.error?.error.code;
  must("revoked_refused", refused.response.status === 401 && refusal === "token_revoked",
    `expected 401 token_revoked, got ${refused.response.status} ${refusal ?? "no error body"}`);
  ok("revoked_refused", refusal);

  ok("done");
}

main().catch((err: unknown) => {
  fail(STEPS[passed] ?? "done", `request failed: ${err instanceof Error ? err.message : String(err)}`);
});
