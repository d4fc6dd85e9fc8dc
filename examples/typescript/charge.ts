// charge.ts: charge a card with Gatehouse from Node.js, through a client
// generated from api/openapi.yaml, and receive the signed webhook that says the
// charge was captured.
//
//	GATEHOUSE_SECRET_KEY=sk_test_... GATEHOUSE_WEBHOOK_SECRET=whsec_... node dist/charge.js
//
// GATEHOUSE_WEBHOOK_SECRET is the secret of an endpoint registered for
// http://LISTEN_ADDR/webhooks with the event charge.captured (see README.md).
import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import createClient from "openapi-fetch";
import type { components, paths } from "./gatehouse.js";

type Event = components["schemas"]["Event"];

const api = process.env.GATEHOUSE_API || "http://127.0.0.1:8080";
const secretKey = process.env.GATEHOUSE_SECRET_KEY ?? "";
const webhookSecret = process.env.GATEHOUSE_WEBHOOK_SECRET ?? "";
const listenAddr = process.env.LISTEN_ADDR || "127.0.0.1:4242";
if (!secretKey.startsWith("sk_test_") || !webhookSecret.startsWith("whsec_")) {
  console.error("set GATEHOUSE_SECRET_KEY (sk_test_...) and GATEHOUSE_WEBHOOK_SECRET (whsec_...)");
  process.exit(1);
}

// verify checks the Standard Webhooks signature of a delivery (docs/webhooks.md):
// an HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{raw body}", keyed with the
// base64-decoded part of the secret after "whsec_", sent as "v1,<base64>" values
// separated by spaces. A timestamp more than 5 minutes away is refused, so that a
// recorded delivery cannot be replayed later.
function verify(headers: IncomingHttpHeaders, body: Buffer): boolean {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  const signatures = headers["webhook-signature"];
  if (typeof id !== "string" || typeof timestamp !== "string" || typeof signatures !== "string") return false;
  if (!/^\d+$/.test(timestamp) || Math.abs(Date.now() / 1000 - Number(timestamp)) > 5 * 60) return false;
  const key = Buffer.from(webhookSecret.slice("whsec_".length), "base64");
  const mac = createHmac("sha256", key).update(`${id}.${timestamp}.`).update(body);
  const expected = Buffer.from(`v1,${mac.digest("base64")}`);
  return signatures.split(" ").some((value) => {
    const received = Buffer.from(value);
    return received.length === expected.length && timingSafeEqual(received, expected); // constant time
  });
}

let chargeId: string | undefined; // the charge this program creates
const captured = new Set<string>(); // charges whose verified charge.captured arrived

function finishIfCaptured(): void {
  if (chargeId !== undefined && captured.has(chargeId)) process.exit(0);
}

// The webhook receiver: verify the raw bytes first, parse them only afterwards.
const server = createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/webhooks") {
    res.writeHead(404).end();
    return;
  }
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    if (!verify(req.headers, body)) {
      res.writeHead(400).end("invalid signature");
      return;
    }
    // The signature proves the body is Gatehouse's: the Event schema.
    const event: Event = JSON.parse(body.toString("utf8"));
    // event_type discriminates ChargeEvent from RefundEvent: in each branch the
    // compiler knows what `data` holds. (A real receiver would store the event
    // once per event.id, answer 200 at once, and do the work in the background.)
    switch (event.event_type) {
      case "charge.created":
      case "charge.captured":
      case "charge.failed":
      case "charge.voided":
      case "charge.refunded":
        console.log(`verified ${event.event_type} for charge ${event.data.charge.id}`);
        if (event.event_type === "charge.captured") captured.add(event.data.charge.id);
        break;
      case "refund.created":
      case "refund.succeeded":
        console.log(`verified ${event.event_type} for refund ${event.data.refund.id} of charge ${event.data.charge.id}`);
        break;
    }
    res.writeHead(200).end(finishIfCaptured);
  });
});

const separator = listenAddr.lastIndexOf(":");
await new Promise<void>((resolve, reject) => {
  server.once("error", reject);
  server.listen(Number(listenAddr.slice(separator + 1)), listenAddr.slice(0, separator), resolve);
});
console.log(`receiving webhooks on http://${listenAddr}/webhooks`);

// A typed client: paths, bodies and answers all come from api/openapi.yaml.
const client = createClient<paths>({ baseUrl: api, headers: { Authorization: `Bearer ${secretKey}` } });

// One Idempotency-Key per payment: sending the request again with the same key
// (after a timeout, say) answers the same charge instead of charging twice.
const idempotencyKey = randomUUID();
async function createCharge() {
  const { data, error, response } = await client.POST("/v1/charges", {
    params: { header: { "Idempotency-Key": idempotencyKey } },
    body: {
      amount: 2000, // in cents: $20.00
      currency: "usd",
      payment_method: "card",
      card: { number: "4242424242424242", exp_month: 12, exp_year: 2030, cvc: "123" }, // a sandbox test card
      description: "Order 1042",
    },
  });
  if (error) {
    console.error(`create charge: ${response.status} ${error.error.code}: ${error.error.message}`);
    process.exit(1);
  }
  return { charge: data, replayed: response.headers.get("Idempotent-Replayed") === "true" };
}

const first = await createCharge();
chargeId = first.charge.id;
console.log(`charge ${first.charge.id} created (status ${first.charge.status})`);

const again = await createCharge();
if (again.charge.id !== first.charge.id) {
  console.error(`the same Idempotency-Key gave two charges: ${first.charge.id} and ${again.charge.id}`);
  process.exit(1);
}
console.log(`sent again with the same key: charge ${again.charge.id} (the same charge, Idempotent-Replayed: ${again.replayed})`);

// The provider call runs in the background; the charge.captured webhook tells us
// how it ended. It may even have arrived already.
finishIfCaptured();
setTimeout(() => {
  console.error(`no verified charge.captured for charge ${chargeId} within 60 s`);
  process.exit(1);
}, 60_000);
